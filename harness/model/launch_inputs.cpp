// What a run would refuse only while it launches, refused by the loader first so that `validate`
// catches it and `run` leaves no run directory behind (issue 32, item 6): variables the harness
// sets for every rank, names and values an mpirun app file cannot carry.
#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/model/key_checks.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {
namespace loader {

namespace {

// The value of key `key` in map `map`, or an empty node.
YAML::Node value_node(const YAML::Node& map, const std::string& key) {
  if (map && map.IsMap()) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.Scalar() == key) return YAML::Node(it->second);
    }
  }
  return YAML::Node();
}

// One map of variables (env, or rank_env.R) at `at` in the file, as the file has it (its
// nodes carry the marks). Linear: an env map may have tens of thousands of keys.
void check_env_map(const std::string& file, const YAML::Node& map, const std::string& at,
                   const Scenario& s) {
  if (!map || !map.IsMap()) return;
  const auto& names = harness_env_names();
  const std::set<std::string> reserved(names.begin(), names.end());
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key(it->first), value(it->second);
    const std::string k = key.Scalar(), where = at + "." + k;
    ErrorCollector::check([&] {
      check_env_name(file, key, where, k);
      if (reserved.count(k)) {
        fail_at(file, key, where,
                fmt::format("{} is set by the harness for every rank and a scenario cannot set "
                            "it (reserved: {})",
                            k, fmt::join(names, ", ")));
      }
      check_app_file_value(file, value, where, value.IsScalar() ? value.Scalar() : "", s);
    });
  }
}

}  // namespace

void check_env_name(const std::string& file, const YAML::Node& node, const std::string& at,
                    const std::string& key) {
  bool ok = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
  for (char c : key) {
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (!ok) {
    fail_at(file, node, at,
            fmt::format("'{}' is not an environment variable name (allowed: letters, digits and "
                        "'_', not starting with a digit)",
                        key));
  }
}

void check_app_file_value(const std::string& file, const YAML::Node& node, const std::string& at,
                          const std::string& value, const Scenario& s) {
  if (s.topo.launcher != "mpirun") return;
  if (!value.empty() && value.find_first_of(" \t\n\"'") == std::string::npos) return;
  fail_at(file, node, at,
          fmt::format("'{}' is empty or has whitespace or quotes, which launcher mpirun's app "
                      "file cannot carry (allowed: a value without them, or topology.launcher: "
                      "local)",
                      value));
}

void check_launch_inputs(const std::string& file, const YAML::Node& doc, const Scenario& s) {
  check_env_map(file, doc["env"], "env", s);
  for (const auto& [rank, vars] : s.env.per_rank) {
    check_env_map(file, value_node(doc["rank_env"], std::to_string(rank)),
                  fmt::format("rank_env.{}", rank), s);
  }
  const YAML::Node w = doc["workload"];
  if (s.topo.launcher == "mpirun") {
    // An app-file line is split at whitespace: "--name a b" would reach the rank as three words.
    for (size_t i = 0; i < s.workload.extra_args.size(); ++i) {
      ErrorCollector::check([&] {
        const std::string& a = s.workload.extra_args[i];
        if (!a.empty() && a.find_first_of(" \t\n\"'") == std::string::npos) return;
        const YAML::Node args = w ? w["args"] : YAML::Node();
        fail_at(file, args && args.IsSequence() && i < args.size() ? args[i] : doc,
                fmt::format("workload.args[{}]", i),
                fmt::format("'{}' is empty or has whitespace or quotes, which launcher mpirun's "
                            "app file would split into several words (allowed: one word per "
                            "item, e.g. [\"--name\", \"value\"], or topology.launcher: local)",
                            a));
      });
    }
  }
}

}  // namespace loader

const std::vector<std::string>& harness_env_names() {
  static const std::vector<std::string> names = {
      "FAULTLINE_ARTIFACT_CACHE",      "FAULTLINE_ARTIFACT_URL",
      "FAULTLINE_COMM_TIMEOUT_MS",     "FAULTLINE_CONTROL_ADDR",
      "FAULTLINE_CONTROL_SECRET",      "FAULTLINE_DEVICE_ARENA",
      "FAULTLINE_EVENTS_FILE",         "FAULTLINE_FAULTS",
      "FAULTLINE_FAULT_SEED",          "FAULTLINE_FIRED_LOG",
      "FAULTLINE_FLIGHT_RECORDER_DIR", "FAULTLINE_JIT_DIR",
      "FAULTLINE_LOG_FIDELITY",        "FAULTLINE_PDEATHSIG",
      "FAULTLINE_PLUGIN_PATH",         "FAULTLINE_PROBE_DIR",
      "FAULTLINE_PROBE_FILE",          "FAULTLINE_PROBE_LIB",
      "FAULTLINE_RDZV_TIMEOUT_MS",     "FAULTLINE_RUN_ID"};
  return names;
}

}  // namespace fl::harness
