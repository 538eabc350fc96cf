// What a run would refuse only while it launches, refused by the loader first so that `validate`
// catches it and `run` leaves no run directory behind (issue 32, item 6): variables the harness
// sets for every rank, names and values an mpirun app file cannot carry (whitespace, quotes, and
// '#' or '//', which Open MPI's app-file reader takes for a comment; launch_mpirun.cpp puts a value
// every rank shares in mpirun's own environment instead).
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
      const std::string v = value.IsScalar() ? value.Scalar() : "";
      check_app_file_value(file, value, where, v, s);
      if (s.topo.launcher != "mpirun" || !app_file_comment(v)) return;
      // Shared by every rank, it goes in mpirun's environment (launch_mpirun.cpp: inherited_only).
      const std::string other = env_not_shared(s.env, s.topo.ranks, k, v);
      if (other.empty()) return;
      fail_at(file, value, where,
              fmt::format("'{}' has '#' or '//', which launcher mpirun's app file cannot carry "
                          "(Open MPI reads them as the start of a comment), and it is not every "
                          "rank's value ({}), so mpirun's own environment cannot carry it either "
                          "(allowed: a value without them, one value for every rank, or "
                          "topology.launcher: local)",
                          v, other));
    });
  }
}

}  // namespace

// An argument of every rank's line (workload.args, faults[].args) under launcher mpirun: one word
// the app file carries as it is.
void check_app_file_arg(const std::string& file, const YAML::Node& node, const std::string& at,
                        const std::string& a) {
  if (a.empty() || a.find_first_of(" \t\n\"'") != std::string::npos) {
    fail_at(file, node, at,
            fmt::format("'{}' is empty or has whitespace or quotes, which launcher mpirun's "
                        "app file would split into several words (allowed: one word per "
                        "item, e.g. [\"--name\", \"value\"], or topology.launcher: local)",
                        a));
  }
  if (app_file_comment(a)) {
    fail_at(file, node, at,
            fmt::format("'{}' has '#' or '//', which launcher mpirun's app file cannot carry "
                        "(Open MPI reads them as the start of a comment and the rank's line "
                        "would end there) (allowed: an argument without them, or "
                        "topology.launcher: local)",
                        a));
  }
}

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

bool app_file_comment(const std::string& v) {
  return v.find('#') != std::string::npos || v.find("//") != std::string::npos;
}

std::string env_not_shared(const RankEnv& env, int ranks, const std::string& key,
                           const std::string& value) {
  const auto all = env.all.find(key);
  for (int r = 0; r < ranks; ++r) {
    const auto own = env.per_rank.find(r);
    if (own != env.per_rank.end() && own->second.count(key)) {
      const std::string& v = own->second.at(key);
      if (v != value) return fmt::format("rank {}'s is '{}'", r, v);
    } else if (all == env.all.end()) {
      return fmt::format("rank {} has none", r);
    } else if (all->second != value) {
      return fmt::format("rank {}'s is '{}'", r, all->second);
    }
  }
  return "";
}

void check_fault_app_file_value(const std::string& file, const YAML::Node& node,
                                const std::string& at, const std::string& value,
                                const Scenario& s) {
  check_app_file_value(file, node, at, value, s);
  if (s.topo.launcher != "mpirun" || !app_file_comment(value)) return;
  fail_at(file, node, at,
          fmt::format("'{}' has '#' or '//', which launcher mpirun's app file cannot carry (Open "
                      "MPI reads them as the start of a comment; a fault's value goes in the "
                      "rank's app-file line, only env's values every rank shares go in mpirun's "
                      "own environment) (allowed: a value without them, or topology.launcher: "
                      "local)",
                      value));
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
        const YAML::Node args = w ? w["args"] : YAML::Node();
        check_app_file_arg(file, args && args.IsSequence() && i < args.size() ? args[i] : doc,
                           fmt::format("workload.args[{}]", i), s.workload.extra_args[i]);
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
