// Scenarios: YAML files that say what to run, what to break and what should happen. Every key is
// declared once in a schema table (type, default, allowed values, description); loading checks
// the file against it strictly and reports every problem as file:line:col, the key path and
// what is allowed, suggesting the nearest key for a misspelt one. docs/scenarios.md is generated
// from the same table (`faultline keys`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "base/error.hpp"

namespace fl::harness {

class ScenarioError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

enum class KeyType { kSection, kString, kInt, kFloat, kBool, kEnum, kStringMap, kIntList, kList };

struct KeySpec {
  std::string path;  // "workload.data.samples"; list items: "faults[].plan"
  KeyType type;
  std::string default_value;  // YAML text; empty: no default
  std::string doc;
  std::vector<std::string> choices;  // kEnum
  double min = 0, max = 0;           // kInt / kFloat when min < max
  bool required = false;
  // A check of a scalar value beyond its type (a regex that compiles, ...): fail_at otherwise.
  void (*check)(const std::string& file, const YAML::Node& value, const std::string& key) = nullptr;
};

const std::vector<KeySpec>& scenario_schema();
// Markdown reference of every key (docs/scenarios.md's table).
std::string schema_markdown();
// "integer", "one of a, b", ... as errors and docs name a key's type.
std::string key_type_name(const KeySpec& k);

struct Taxonomy {
  struct Symptom {
    std::string id, name;
    int stage = 0;
  };
  std::vector<Symptom> symptoms;
  std::vector<std::string> root_causes;   // ids
  std::vector<std::string> fix_patterns;  // ids
  const Symptom* symptom(const std::string& id) const;
};
// scenarios/taxonomy.yaml of the source tree, or FAULTLINE_TAXONOMY.
const Taxonomy& taxonomy();

namespace faults {
class Fault;  // an out-of-process fault (harness/faults/fault.hpp)
}

// An oracle's own parameters (its expect keys), parsed by that oracle into a struct of its own
// file (harness/oracles/).
struct OracleParams {
  virtual ~OracleParams() = default;
};

// What every expectation has; the rest belongs to its oracle (`params`).
struct Expect {
  std::string symptom;  // empty: none (a clean run)
  std::string oracle;
  double within_s = 0;  // 0: anywhere in the run
  std::vector<int> ranks;
  bool absent = false;  // the oracle must NOT observe its symptom, and the run must complete
  // any / all: the expectations combined (each judged on its own, absent included).
  std::vector<Expect> of;
  std::shared_ptr<const OracleParams> params;  // nullptr: the oracle's defaults
};

// workload: what every rank runs. The harness reads a few values itself, typed here; every key a
// worker declares is in `options` as resolved, and goes to the worker as its flag without the
// harness naming it (harness/model/worker_options.hpp, workload_kinds.hpp).
struct WorkloadSpec {
  std::string kind = "train", model = "tiny", precision = "fp32";
  std::string device = "cpu";          // cpu or cuda
  std::string fidelity = "faultline";  // error-line dialect: faultline or pytorch
  int64_t steps = 0;
  // kind infer: what must fit in the context (seq_len: workload.shape.seq_len, 0: the model's).
  int64_t prompt_len = 0, new_tokens = 0, seq_len = 0;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool auto_resume = false;  // ranks resume from the run's checkpoints when there are any
  std::vector<std::string> plugins;
  bool jit = false;                // build the plugins from source at start
  std::vector<std::string> fetch;  // artifacts every rank fetches from the run's hub at start
  std::vector<std::string> extra_args;
  // kind: command (harness/run/command_launch.cpp)
  std::vector<std::string> command;
  std::string launch = "per_rank";  // per_rank or once
  bool probe = true;
  double report_timeout_s = 120;
  // Every key the workers declare, resolved ("workload.zero.reduce_bucket_size" -> 4096).
  std::map<std::string, YAML::Node> options;
  // One of them; throws ScenarioError for a key no worker declares.
  const YAML::Node& option(const std::string& key) const;
  template <class T>
  T get(const std::string& key) const {
    return option(key).as<T>();
  }
};

// reference: where the scenario comes from.
struct Reference {
  std::string issue, url, symptom, root_cause, fix_pattern;
  // issue, pr (a cited thread: issue or pr), stands-for (a mechanism, and no thread), or "" (no
  // citation).
  std::string kind, pr, mechanism;
};

// topology: the ranks, how they are launched and laid out.
struct Topology {
  int ranks = 1, nodes = 1, dp = 1, tp = 1, pp = 1, zero = 0;
  std::string backend, launcher;
  // topology.launcher: auto (the default): why `launcher` was chosen ("" when named).
  std::string launcher_reason;
  std::string network = "host";  // host, namespaces
  // topology.nics: each namespaced node's network interfaces after eth0, in order (eth1, eth2,
  // ...), each its egress rate in tc syntax or "unlimited". Empty: eth0 alone. eth0 is the one
  // the ranks use unless their environment says otherwise.
  std::vector<std::string> nics;
  // OMP_NUM_THREADS of the ranks: "auto" (where the harness starts each rank itself it sets 1
  // when a node runs several ranks, as torchrun does; other launchers set nothing) or "unset"
  // (nothing sets it).
  std::string omp_num_threads = "auto";
  // Hosts mpirun spreads the ranks over (topology.hosts; empty: this machine only), each one's
  // address when given as NAME=ADDRESS ("" otherwise), and the rsh agent that reaches them.
  std::vector<std::string> hosts, host_addrs;
  std::string rsh_agent;
  // topology.deepspeed: DeepSpeed runner's arguments for launcher: deepspeed (docs/cluster.md).
  struct Deepspeed {
    std::string hostfile;  // an absolute path ("" none); a missing file is the runner's warning
    std::string hostfile_text;  // the hostfile given inline (written to RUN_DIR/hostfile)
    std::string include, exclude;
    int num_nodes = -1, num_gpus = -1;
    int device_count = 0;            // devices per node (0: ranks here, each hostfile host's slots)
    std::string version = "latest";  // DeepSpeed's; before 0.15.2 --include slots are checked
  } deepspeed;
};

// faults: what to break.
struct FaultList {
  std::vector<std::string> plans;  // in-process, injector grammar
  // Out-of-process faults, parsed by their kinds (harness/faults/); each run drives a copy.
  std::vector<std::shared_ptr<const faults::Fault>> oop;
};

// timeouts: deadlines.
struct Timeouts {
  double run_s = 0;
  int64_t comm_ms = 0, rendezvous_ms = 0;
};

// env and rank_env: what the ranks get in their environment.
struct RankEnv {
  std::map<std::string, std::string> all;
  std::map<int, std::map<std::string, std::string>> per_rank;

  // The scenario sets `var` for every rank or for one.
  bool sets(const std::string& var) const {
    if (all.count(var)) return true;
    for (const auto& [rank, env] : per_rank) {
      if (env.count(var)) return true;
    }
    return false;
  }
};

// Tools started beside the run (detectors, a recovery tool): names or command lines.
struct Tools {
  std::vector<std::string> detectors;
  std::string recovery;
};

// The runs beside this one.
struct SideRunSpec {
  // The preparation run's scenario (YAML), run to completion in the run directory before this
  // one starts; its checkpoints become this run's. Empty: none.
  std::string prepare_yaml;
  // A command run between the preparation run and this one (argv; a project tool, paths inside
  // the run directory), e.g. fl-ckpt reshard. Empty: none.
  std::vector<std::string> after_prepare;
  // The reference run's scenario (YAML) for the baseline oracle: this one without its faults,
  // with the `baseline:` overrides; run beside this one, in RUN_DIR/baseline. Empty: none.
  std::string baseline_yaml;
};

struct Scenario {
  std::string file;
  std::string name, description;
  uint64_t seed = 0;
  bool has_fix = false;
  Reference ref;
  Topology topo;
  WorkloadSpec workload;
  FaultList faults;
  Expect expect;
  Timeouts timeouts;
  RankEnv env;
  Tools tools;
  SideRunSpec side_runs;

  YAML::Node resolved;  // every key, defaults filled in (written to the run directory)
};

// The FAULTLINE_ variables the harness sets for a rank (its identity, channels and run files):
// a scenario's env or rank_env cannot set them (launch_inputs.cpp).
const std::vector<std::string>& harness_env_names();

struct LoadOptions {
  bool apply_fix = false;              // merge the scenario's `fix:` overrides
  std::vector<std::string> overrides;  // "workload.steps=20" (YAML values), applied last
};

// Loads, merges `extends:` bases, applies the fix and overrides, validates and resolves.
// Throws ScenarioError ("file:line:col: key: problem (allowed: ...)"); a file with several
// problems gets one error listing all of them ("FILE: 3 errors:" then one per line).
Scenario load_scenario(const std::string& path, const LoadOptions& opts = {});

// One expectation from YAML text (an expect map, "{oracle: hang, hang_s: 4}"): its keys checked
// against the schema, the defaults filled in and parsed as load_scenario parses `expect:` (its
// oracle parses its own keys). For tools and tests; ScenarioError as load_scenario's.
Expect parse_expect_text(const std::string& yaml);

// A recovery tool given beside the scenario (`--recovery`): when topology.launcher: auto chose
// mpirun and that tool needs rank processes of the harness's own (shrink, a command of its own),
// the run gets the local launcher instead, and the reason says so. Else `s` unchanged.
Scenario with_recovery_launcher(Scenario s, const std::string& recovery);

// Scenario files (*.yaml) under `dir`, recursively, sorted.
std::vector<std::string> scenario_files_under(const std::string& dir);

// workload.command's placeholders ({rank}, {master_port}, ...), and one argument with them
// replaced by `values`; "{{" is a literal brace. An unknown name: "" and *error says which.
const std::vector<std::string>& command_placeholders();
std::string expand_command_arg(const std::string& arg,
                               const std::map<std::string, std::string>& values,
                               std::string* error);

}  // namespace fl::harness
