// The checks a scenario key's parser builds on, shared by the loader (harness/scenario) and the
// fault kinds' parsers (harness/faults), which sit below it: error collection, errors at
// file:line:col, sizes, paths inside the run directory, tc rates, environment names and values.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "harness/model/scenario.hpp"

namespace fl::harness::loader {

// Collects the problems of one load instead of stopping at the first: the outermost collector on
// a thread is active until it goes out of scope; fail_at's errors caught at a key boundary go
// into it. throw_if_any() throws one ScenarioError with all of them ("FILE: 3 errors:" and one
// "file:line:col: key: problem" per line; a single problem reads as before).
class ErrorCollector {
 public:
  ErrorCollector();
  ~ErrorCollector();
  ErrorCollector(const ErrorCollector&) = delete;
  ErrorCollector& operator=(const ErrorCollector&) = delete;

  // Records `e` in the active collector; false when none is active (the caller rethrows).
  static bool collect(const ScenarioError& e);
  static bool any();
  static size_t count();  // collected so far
  static void throw_if_any(const std::string& file);
  // Runs `f`; a ScenarioError it throws is collected (or rethrown without a collector).
  template <class F>
  static void check(F&& f) {
    try {
      f();
    } catch (const ScenarioError& e) {
      if (!collect(e)) throw;
    }
  }

 private:
  bool owner_;
  std::vector<std::string> errors_;
  std::unordered_set<std::string> seen_;  // errors_ as a set: collecting stays linear
};

// Throws ScenarioError "file:line:col: path: what" (the node's mark; without one, "file: path").
[[noreturn]] void fail_at(const std::string& file, const YAML::Node& node, const std::string& path,
                          const std::string& what);

// A key of a list item (list items get no schema defaults filled in).
template <class T>
T opt(const YAML::Node& n, const char* key, T fallback) {
  return n[key] ? n[key].as<T>() : fallback;
}

// "64k", "300m", "2g" or plain bytes; fail_at otherwise.
int64_t parse_size(const std::string& file, const YAML::Node& n, const std::string& key);
// Faults touch only the run directory: no absolute paths, no way out with "..".
void check_relative(const std::string& file, const YAML::Node& n, const std::string& key,
                    const std::string& p);
// A tc rate ("1mbit", "500kbps"): a positive number with one of tc's units.
void check_tc_rate(const std::string& file, const YAML::Node& n, const std::string& key);
// A version a job sees (workload.versions.*): "" or base/version.hpp's form.
void check_version(const std::string& file, const YAML::Node& n, const std::string& key);
// A regex the oracles compile (std::regex, ECMAScript).
void check_regex(const std::string& file, const YAML::Node& n, const std::string& key);

// launch_inputs.cpp: what a launch would refuse, refused at load (file:line:col): env and
// rank_env names that are not variable names or that the harness sets (harness_env_names), and
// with launcher mpirun values and workload.args an app file cannot carry. Collected.
void check_launch_inputs(const std::string& file, const YAML::Node& doc, const Scenario& s);
// An environment variable name (letters, digits, '_'; no digit first), and with launcher mpirun a
// value its app file can carry (not empty, no whitespace or quotes); fail_at otherwise.
void check_env_name(const std::string& file, const YAML::Node& node, const std::string& at,
                    const std::string& key);
void check_app_file_value(const std::string& file, const YAML::Node& node, const std::string& at,
                          const std::string& value, const Scenario& s);
// Open MPI's app-file reader ends a line at '#' or "//" (a comment): a word with either cannot go
// in an app file (launch_mpirun.cpp).
bool app_file_comment(const std::string& v);
// "" when every rank of `ranks` gets `value` for `key` from env and rank_env (launch_mpirun.cpp
// then puts it in mpirun's own environment, not the app file); else which rank differs and how.
std::string env_not_shared(const RankEnv& env, int ranks, const std::string& key,
                           const std::string& value);
// A value a fault sets in a rank's environment (faults[].env.set): with launcher mpirun as
// check_app_file_value, and no '#' or '//' (it goes in the rank's app-file line).
void check_fault_app_file_value(const std::string& file, const YAML::Node& node,
                                const std::string& at, const std::string& value, const Scenario& s);
// An argument (workload.args, faults[].args) under launcher mpirun: one word, not empty, without
// whitespace, quotes, '#' or '//'; fail_at otherwise. The caller checks the launcher.
void check_app_file_arg(const std::string& file, const YAML::Node& node, const std::string& at,
                        const std::string& a);

}  // namespace fl::harness::loader
