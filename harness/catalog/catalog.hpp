// The catalogue (the 34 symptoms with our descriptions, their usual causes and fixes, and the
// scenarios that reproduce each) and suites (many scenarios, their fix variants and seeds, run in
// parallel and summarised as a table, JUnit XML and JSON).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness {

struct ScenarioRef {
  std::string file, name, symptom, root_cause, fix_pattern, issue;
  bool has_fix = false;
};

struct CatalogEntry {
  std::string id, name, about;
  int stage = 0;
  std::vector<std::string> causes, fixes;
  std::vector<ScenarioRef> scenarios;
};

// scenarios/catalog.yaml joined with the taxonomy and every scenario under `scenarios_dir` that
// names a symptom. Throws ScenarioError for a catalogue that misses a symptom or names an
// unknown cause or fix, and for a scenario that does not load.
std::vector<CatalogEntry> load_catalog(const std::string& catalog_file,
                                       const std::string& scenarios_dir);
std::string catalog_table(const std::vector<CatalogEntry>& entries);
nlohmann::json catalog_json(const std::vector<CatalogEntry>& entries);

struct SuiteOptions {
  std::string results_dir = "results/suites";
  int jobs = 2;
  bool progress = true;
  std::string junit_path, json_path;  // "" : inside the suite's results directory
  std::string faultline_bin;          // the CLI that runs each scenario (default: this one)
  std::vector<std::string> run_args;  // appended to every `faultline run` (e.g. --detector X)
  std::string name_suffix;            // appended to the suite directory's name
};

struct SuiteCase {
  std::string scenario_file, name, symptom;
  uint64_t seed = 0;
  bool fix = false;          // the fix variant
  std::string outcome;       // pass, fail, unknown, error
  std::string explanation;   // the verdict's
  double manifested_s = -1;  // when the symptom showed (faulty variant)
  double wall_s = 0;
  double tokens_per_s = 0;  // median over the run's steps (slowest rank's view), 0 : none
  std::string run_dir;
};

struct SuiteResult {
  std::string name, dir;
  std::vector<SuiteCase> cases;
  int failures() const;
};

// `path`: a suite YAML (name, scenarios: globs relative to it, seeds, fix) or a directory of
// scenarios. Every scenario runs as it is (it must reproduce its symptom: verdict pass) and, with
// fix, with its fix applied (verdict pass = the fix clears it), each seed once.
SuiteResult run_suite(const std::string& path, const SuiteOptions& options);
std::string suite_table(const SuiteResult& r);
std::string suite_junit(const SuiteResult& r);
nlohmann::json suite_json(const SuiteResult& r);

}  // namespace fl::harness
