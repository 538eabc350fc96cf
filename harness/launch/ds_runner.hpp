// DeepSpeed's runner (deepspeed/launcher/runner.py) and per-node launcher (launch.py), as the
// `deepspeed` launcher and fl-ds-runner use them: the hostfile's `host slots=N` lines, the
// --include / --exclude host:slot filters, --num_nodes / --num_gpus, CUDA_VISIBLE_DEVICES without a
// hostfile, and the environment launch.py gives each slot's process. Same results and the same
// error texts as the Python, function by function (the names below are DeepSpeed's), including
// what it does not check (an --include slot beyond the host's slots is accepted).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fl::harness::ds {

// A Python exception the runner raises: `type` (ValueError, RuntimeError, IndexError) and its text.
struct RunnerError : std::runtime_error {
  RunnerError(std::string t, const std::string& what)
      : std::runtime_error(what), type(std::move(t)) {}
  std::string type;
};

// Ordered as the hostfile (an OrderedDict in runner.py).
using ResourcePool = std::vector<std::pair<std::string, int>>;                  // host -> slots
using ActiveResources = std::vector<std::pair<std::string, std::vector<int>>>;  // host -> slot ids

// _parse_hostfile: `^(\S+)\s+slots=(\d+)` per line, `#` comments and blank lines skipped.
ResourcePool parse_hostfile(const std::vector<std::string>& lines);
// parse_node_config_list: "NAME[:SLOT[,SLOT...]][@...]" -> host -> sorted unique slots, in order of
// first mention.
ActiveResources parse_node_config_list(const std::string& list);
// "latest" or MAJOR.MINOR.PATCH (digits), as topology.deepspeed.version accepts.
bool version_ok(const std::string& version);
// Whether `version` is older than major.minor.patch ("latest" never is). What changed when:
//   0.5.7  (PR #960)  runner.main reads CUDA_VISIBLE_DEVICES without a hostfile (before: ignored);
//   0.14.5 (PR #5769) it prints "Detected VISIBLE_DEVICES=" (before: CUDA_VISIBLE_DEVICES=);
//   0.15.2 (PR #6530) an --include host's slots are the include's own ids; before, each NODE_SPEC
//                     was applied in turn as written and its slots checked against range(slots).
bool older_than(const std::string& version, int major, int minor, int patch);
// Before 0.15.2.
bool legacy_filter(const std::string& version);

// parse_resource_filter and parse_inclusion_exclusion (`legacy`: before 0.15.2).
ActiveResources parse_resource_filter(const ActiveResources& host_info, const std::string& include,
                                      const std::string& exclude, bool legacy = false);
ActiveResources parse_inclusion_exclusion(const ResourcePool& pool, const std::string& include,
                                          const std::string& exclude, bool legacy = false);
// encode_world_info: urlsafe base64 of json.dumps(world_info) (Python's separators).
std::string encode_world_info(const ActiveResources& world);

// runner.main's arguments, as far as they choose resources.
struct RunnerArgs {
  bool has_hostfile = false;          // fetch_hostfile found the file
  std::vector<std::string> hostfile;  // its lines
  std::string include, exclude;
  int num_nodes = -1, num_gpus = -1;
  std::string visible_devices;  // the runner's CUDA_VISIBLE_DEVICES ("" unset)
  // get_accelerator().device_count() without a hostfile: the devices visible to the runner itself
  // (torch caches the count while CUDA_VISIBLE_DEVICES is still set, before runner.main deletes
  // it), i.e. `visible_count` of the list, or `device_count` when it is unset.
  int device_count = 0;
  std::function<int(const std::string&)> visible_count;  // empty: the list's entries
  std::string version = "latest";                        // DeepSpeed's (older_than)
};

// What runner.main decides.
struct RunnerWorld {
  ResourcePool pool;  // the hostfile's (or localhost's) slots: each node's device count
  ActiveResources active;
  bool multi_node = false;
};
// runner.main up to encode_world_info; the lines it prints on the way go to `printed` (also when
// it then throws RunnerError).
RunnerWorld resolve_world(RunnerArgs args, std::vector<std::string>& printed);

// One process launch.py starts, with the variables it sets.
struct SlotProcess {
  std::string host;
  int node_rank = 0, nnodes = 0, rank = 0, local_rank = 0, local_size = 0, world_size = 0;
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES: the node's slot ids, comma-joined
  int node_devices = 0;         // the host's slots in the pool (the devices the node has)
};
// launch.main over every node: global ranks in node order, LOCAL_RANK = rank % local procs.
// Throws RunnerError (IndexError) for an empty world, as launch.py's node_list[node_rank] does.
std::vector<SlotProcess> launch_layout(const RunnerWorld& world);

}  // namespace fl::harness::ds
