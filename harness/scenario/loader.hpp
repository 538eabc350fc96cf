// Internal to harness/scenario: the pieces load_scenario (scenario.cpp) builds on — schema
// validation with error collection, the deep merge, `extends:` and --set (validate.cpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_set>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "harness/model/key_checks.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness::loader {

// input_checks.cpp. The file read whole (at most FAULTLINE_SCENARIO_MAX_BYTES; UTF-8; one YAML
// document): ScenarioError otherwise, with the line and column.
YAML::Node read_scenario_file(const std::string& path);
YAML::Node parse_scenario_text(const std::string& file, const std::string& text);
int64_t scenario_max_bytes();
// Keys given twice in one map, anywhere under `node` (collected; linear).
void check_duplicate_keys(const std::string& file, const YAML::Node& node, const std::string& path);
// workload.plugins names: identifiers ([A-Za-z_][A-Za-z0-9_]*), as they become libfl_NAME.so.
void check_identifier(const std::string& file, const YAML::Node& n, const std::string& key);
// An item of reference.needs: a key of the schema that holds a value (not a section), outside
// reference: (a copy that changed it would no longer build the scenario's mechanism).
void check_needed_key(const std::string& file, const YAML::Node& n, const std::string& key);
// The context length of `model` (tiny 16, small 64, as workloads/model/config.cpp) unless
// workload.shape.seq_len overrides it.
int64_t model_context(const std::string& model, int64_t seq_len_override);
// kind: infer: a prompt longer than the model's context, or a prompt and its new tokens that do
// not fit in it, fail at workload.infer.prompt_len / new_tokens (file:line:col).
void check_infer_context(const std::string& file, const YAML::Node& doc, const Scenario& s);
// workload.cpp: s.workload from the resolved `r` (after the seed and topology), its checks
// reporting at `doc`'s positions.
void parse_workload(const std::string& path, const YAML::Node& doc, const YAML::Node& r,
                    Scenario& s);

// command_checks.cpp: workload.command only with kind command, and then a program, known
// placeholders, the local launcher, no in-process plans; sets s.topo.launcher to command.
void check_command_workload(const std::string& file, const YAML::Node& doc, Scenario& s);

// launcher_choice.cpp: topology.launcher: auto (the default). A CPU MPI world of more than
// kAutoMpirunAbove ranks gets mpirun unless something in it needs the local launcher's own
// process per rank (network namespaces, an out-of-process fault, a recovery tool that restarts
// ranks, an environment mpirun's app file cannot carry); everything else gets local. `resolved`:
// the scenario with its defaults; `s`: loaded up to its faults.
inline constexpr int kAutoMpirunAbove = 8;
struct LauncherChoice {
  std::string launcher, reason;
};
LauncherChoice choose_launcher(const std::string& file, const YAML::Node& resolved,
                               const Scenario& s);
// Why recovery tool `recovery` (a policy or a command line) needs rank processes of the
// harness's own; "" when it does not (or there is none).
std::string recovery_reason(const std::string& recovery);
// A side run (the preparation run, the baseline's reference run) of a scenario whose launcher was
// chosen runs under the same one, even where it drops what kept that one local (its faults):
// `launcher` goes into its YAML unless that names one other than auto.
void pin_side_run_launcher(std::string& yaml, const std::string& launcher);

// Deep merge: maps merge key by key, everything else is replaced by `over`.
YAML::Node merge(const YAML::Node& base, const YAML::Node& over);
// Loads and validates a file and the files it `extends:` (cycles are errors).
YAML::Node load_file(const std::string& path, std::vector<std::string>& chain);
// Every key with a default, as a document.
YAML::Node defaults();
// Applies "key.path=value" (--set) to `doc`, validating the key and the value.
void apply_override(YAML::Node& doc, const std::string& text, const std::string& file);

// expect.cpp: an expectation (recursively for any / all), and the runs beside the run: the
// after_prepare command and the baseline oracle's reference scenario (Scenario::baseline_yaml).
Expect parse_expect(const std::string& file, const YAML::Node& resolved, const YAML::Node& doc_node,
                    const std::string& path);
void parse_side_runs(const std::string& file, const YAML::Node& doc, Scenario& s);
// A run beside the scenario's own (the preparation run, the baseline's reference run), as YAML:
// `doc` without the keys in `drop`, with `overrides` merged in (when given), named `name`, and
// expected to complete.
std::string side_run_yaml(const YAML::Node& doc, std::initializer_list<const char*> drop,
                          const YAML::Node& overrides, const std::string& name);
const std::vector<std::string>& after_prepare_tools();

// hosts.cpp: topology.hosts or topology.hostfile (hostfile.hpp) and topology.rsh_agent into `s`
// (nodes become the hosts).
void parse_hosts(const std::string& file, const YAML::Node& doc, const YAML::Node& topology,
                 Scenario& s);
// deepspeed_topology.cpp: topology.deepspeed (launcher deepspeed): the runner's arguments, and
// topology.ranks from the world it chooses when the scenario leaves ranks out.
void parse_deepspeed(const std::string& file, const YAML::Node& doc, const YAML::Node& root,
                     Scenario& s);

// reference.cpp: `reference:` into `s` (ref_*): one cited thread (issue or pr, the url linking
// it) or a stands-for mechanism, never both. `r` has the defaults filled in, `doc` the positions.
void parse_reference(const std::string& file, const YAML::Node& doc, const YAML::Node& r,
                     Scenario& s);

}  // namespace fl::harness::loader
