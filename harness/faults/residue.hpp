// What a harness killed with SIGKILL can leave outside its run directory, found and removed by
// the next run and by `faultline clean` (issue 32, item 5): only what is faultline's by name and
// only once its owner is gone.
//
//   cgroup   ROOT/faultline.<pid>-<start>.* under the memory and cpu hierarchies (cgroup.hpp);
//            the owner is the harness or agent whose pid and start time the name holds. What is
//            still inside is killed first (ranks that outlived their harness).
//   arena    /dev/shm/faultline.<pid>.*.arena of harnesses before memfd arenas (memory_limit.cpp).
//   segment  /dev/shm/faultline-shm-* of the shared-memory transport that no process maps and
//            that is older than a minute (a rank killed between creating its segment and
//            unlinking it once its peers mapped it; workloads/comm/shm_transport.cpp), this
//            user's only.
//   relay    /tmp/faultline-relay-XXXXXX of an agent killed outright (agent/relay.cpp: the
//            private directory of a relay socket whose run path was too long for one), this
//            user's only, once no socket is bound at its relay.sock (from /proc/net/unix).
//   control  /tmp/faultline-control-XXXXXX of a harness killed outright (run_setup.cpp: the short
//            link to a run directory whose control socket path was too long for one), this
//            user's only, once no socket is bound at its run/control.sock. The link is removed,
//            not followed: the run directory stays.
//
// Network namespaces and mounts need no sweep: the run's are held by processes that die with the
// harness (sandbox.hpp), and nothing names them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness::faults {

struct Residue {
  std::string kind;  // cgroup, arena, segment, relay, control
  std::string path;
  std::string owner;  // who left it and why it counts as abandoned
  std::string error;  // empty once removed (or, dry run, never tried)
};

struct ResidueDirs {
  std::vector<std::string> cgroup_roots;  // default: the memory and cpu hierarchies
  std::string shm = "/dev/shm";
  std::string tmp = "/tmp";  // where agents and harnesses make their socket directories
};

ResidueDirs default_residue_dirs();

// Everything abandoned under `dirs`; removed unless `dry_run`.
std::vector<Residue> sweep_residue(const ResidueDirs& dirs, bool dry_run);

nlohmann::json residue_json(const std::vector<Residue>& found, bool dry_run);

// `faultline clean [--dry-run] [--json]`: a line per thing found, what was done; exit 0 when
// nothing is left (or, dry run, always), 1 when something could not be removed.
int clean_command(bool dry_run, bool json);

}  // namespace fl::harness::faults
