// The options the workers declare for scenarios (workloads/runtime/options.hpp): the build asks
// each workload kind's worker (`--describe-options`) and compiles the answer in, so `validate`
// knows every workload key offline. They become the schema's workload rows, and a scenario's
// values for them become the worker's flags, without the harness naming any of them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "harness/model/scenario.hpp"

namespace fl::harness {

struct WorkerOption {
  std::string key, type, help;  // type: section, int, float, bool, string, list
  std::string flag, negation;   // negation: a bool flag's "false" form ("--no-zero-init")
  std::string default_value;    // the worker's own (YAML text)
  std::string scenario_default;
  std::vector<std::string> choices;
  std::string format;  // "version": a version string (base/version.hpp)
  double min = 0, max = 0;
  bool flag_only = false, always = false;
  std::vector<std::string> kinds;  // the workload kinds whose worker declares it
};

// The build's JSON ({"KIND": [option, ...]}, cmake/WorkerOptions.cmake).
const char* worker_options_json();

// Every declared option, once per key in the order first declared; a key two workers declare
// differently (type, flag, scenario default) throws ScenarioError naming both.
const std::vector<WorkerOption>& worker_options();
std::vector<WorkerOption> parse_worker_options(const std::string& json);

// The schema rows of the workers' keys.
std::vector<KeySpec> worker_option_keys();

// The flags that carry `values` (key -> resolved YAML node) to `kind`'s worker: one option after
// another as declared, each where its value differs from the worker's own default (or always,
// when the worker says so); a list repeats its flag per item.
std::vector<std::string> worker_option_flags(const std::string& kind,
                                             const std::map<std::string, YAML::Node>& values);
// The same over `options` (tests).
std::vector<std::string> worker_option_flags(const std::vector<WorkerOption>& options,
                                             const std::string& kind,
                                             const std::map<std::string, YAML::Node>& values);

}  // namespace fl::harness
