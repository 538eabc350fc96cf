// Suites: many scenarios, their fix variants and seeds, run as separate `faultline run` processes
// a few at a time, like a test runner runs tests — selected by name, symptom, stage, exclusion,
// last failures or shard, retried, stopped after the first (or N) failures on request — and
// summarised as a table, JUnit XML and a JSON summary with the run's provenance
// (docs/catalog.md#running-them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "harness/suite/provenance.hpp"

namespace fl::harness {

class SuiteLive;

// Bad input to a suite option or a selection that matches nothing (exit 2).
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

struct SuiteSelection {
  std::vector<std::string> only;      // globs on the scenario name (any may match)
  std::vector<std::string> exclude;   // globs on the scenario name: none may match
  std::vector<std::string> symptoms;  // symptom ids, "4.11" (any may match)
  std::vector<int> stages;            // 1-5 (any may match); clean runs have no stage
  std::vector<uint64_t> seeds;        // replaces the suite's seeds when not empty
  bool last_failed = false;           // only the cases that did not pass last time
  int shard_index = 0;                // 1-based; 0 with shard_count 0: no sharding
  int shard_count = 0;
  bool empty() const;
};

struct SuiteOptions {
  std::string results_dir = "results/suites";
  // Accept a results directory other users can write, with a warning (else refused; the runs
  // get --allow-shared-results through run_args).
  bool allow_shared_results = false;
  int jobs = 2;
  bool progress = true;
  std::string junit_path, json_path;  // "" : inside the suite's results directory
  std::string faultline_bin;          // the CLI that runs each scenario (default: this one)
  std::vector<std::string> run_args;  // appended to every `faultline run` (e.g. --detector X)
  std::string name_suffix;            // appended to the suite directory's name
  SuiteSelection select;
  int retries = 0;           // more tries for a case that failed (not for harness errors)
  bool fail_fast = false;    // start nothing new after the first failure
  int max_fail = 0;          // start nothing new after this many failed cases (0: no limit)
  int calibrate_every = 10;  // finished runs between calibration samples (0: start and end only)
  // --longest-first: a summary.json (or the suite directory that holds one) whose cases' times
  // order the launches, longest first; cases it does not hold start before them, in suite order.
  // "" : suite order. The summary and the table keep suite order either way.
  std::string longest_first;
  // Where the runs execute: "local" (this machine, `jobs` at a time) or "slurm" (one sbatch job
  // array; docs/cluster.md#suites-as-a-slurm-job-array).
  std::string executor = "local";
  // The live /metrics endpoint (docs/reports.md#live-metrics): "" off, else IPV4:PORT; requests
  // need metrics_secret, or the one drawn into SUITE_DIR/metrics.secret when that is empty.
  std::string metrics_listen, metrics_secret;
  struct Slurm {
    std::string partition;                 // "" : the cluster's default partition
    std::string time_limit;                // each array task's --time ("" : the partition's)
    bool overcommit = false;               // ranks share CPUs (sbatch --overcommit)
    int max_running = 0;                   // array tasks at once (--array=...%N); 0: no limit
    std::vector<std::string> sbatch_args;  // passed to sbatch as they are
  } slurm;
};

// One try of a case.
struct SuiteAttempt {
  std::string outcome, explanation, run_dir;
  double wall_s = 0;
  std::string job;  // slurm: "JOB_INDEX STATE" of the array task that ran it ("" : local)
};

struct SuiteCase {
  std::string scenario_file, name, symptom;
  int stage = 0;  // the symptom's stage (taxonomy); 0 for a clean run
  uint64_t seed = 0;
  bool fix = false;            // the fix variant
  std::string device = "cpu";  // workload.device: a cuda case is skipped without a device
  // pass; fail, unknown (the expectation did not hold / could not be decided); error (harness
  // or input error); flaky (failed, then passed on a retry); skipped (not run: no device, or
  // left over by --fail-fast); interrupted (the run, or the suite, got SIGINT/SIGTERM before the
  // run ended, or the case was not started because of it).
  std::string outcome;
  std::string explanation;   // the verdict's (of the last try), or why it was skipped
  double manifested_s = -1;  // when the symptom showed (faulty variant)
  double wall_s = 0;         // every try together
  double tokens_per_s = 0;   // median over the run's steps (slowest rank's view), 0 : none
  std::string run_dir;       // the last try's
  std::vector<SuiteAttempt> attempts;
  // --shard and merge: the shard that ran the case ("2/3"; "" unsharded) and, in a merged
  // result, the suite directory it came from (harness/suite/merge.hpp).
  std::string shard, shard_dir;

  // "name[-fix]-s<seed>": the run id of the first try, the shard key, the --last-failed key.
  std::string id() const;
  std::string variant() const { return fix ? "fix" : "faulty"; }
  // Counts against the suite: fail, unknown, error, interrupted.
  bool failed() const;
};

struct SuiteResult {
  std::string name, dir;
  std::vector<SuiteCase> cases;
  double wall_s = 0;  // the suite's wall clock
  Provenance provenance;
  nlohmann::json selection = nlohmann::json::object();  // the options that chose the cases
  std::string interrupted;         // the signal the suite itself got ("" when none)
  std::vector<std::string> notes;  // files the suite's globs matched but did not load, and why
  nlohmann::json slurm;            // slurm executor: its jobs, partition, request (null : local)
  // A merged result (faultline merge): the cases of the shards' plan that no directory holds
  // (outcome "missing"), and the merge's account: shards, duplicates, missing (null : no merge).
  std::vector<SuiteCase> missing;
  nlohmann::json merge;
  SuiteLive* live = nullptr;  // while it runs with --metrics-port: what the executor reports to
  std::vector<size_t> launch_order;  // SuitePlan::launch_order: the first tries' order
  int failures() const;  // cases that make the suite fail (fail, unknown, error, interrupted)
  int count(const std::string& outcome) const;
  // faultline suite's (and merge's) exit status: 4 when the suite or a case was interrupted,
  // else 1 when a case failed or is missing, else 0.
  int exit_code() const;
};

// What a suite would run: its name and the selected cases (every scenario loaded and checked).
struct SuitePlan {
  std::string name;
  std::vector<SuiteCase> cases;
  std::string previous_dir;  // --last-failed: the results it read
  // --longest-first: the indices of `cases` in launch order (empty: suite order).
  std::vector<size_t> launch_order;
  nlohmann::json selection = nlohmann::json::object();
  // --shard: every shard's cases (the selection before --shard), as --list --json writes a case;
  // summary.json keeps them (selection.planned) so a merge can name the cases no shard ran.
  nlohmann::json planned = nlohmann::json::array();
  // Files the globs (or the directory) matched that are suite files, not scenarios (the suite
  // file itself when a glob covers its own folder): skipped, one note each.
  std::vector<std::string> notes;
};

// The values of SuiteOptions::executor, in the order errors and `faultline suite --help` list
// them (run_suite picks the executor by name).
const std::vector<std::string>& executor_names();

// `path`: a suite YAML (name, scenarios: globs relative to it, seeds, fix) or a directory of
// scenarios. Every scenario runs as it is (it must reproduce its symptom: verdict pass) and, with
// fix, with its fix applied (verdict pass = the fix clears it), each seed once. Throws
// ScenarioError for a broken suite or scenario, UsageError for a selection that matches nothing.
SuitePlan plan_suite(const std::string& path, const SuiteOptions& options);
SuiteResult run_suite(const std::string& path, const SuiteOptions& options);

// --list: one line per case (scenario, variant, seed, symptom), the notes and the count.
std::string suite_list(const SuitePlan& plan);
// --list --json: the same as JSON (suite, count, scenarios, cases with the keys of summary.json's
// cases, selection, notes).
nlohmann::json suite_list_json(const SuitePlan& plan);
// Whether a YAML file is a suite file rather than a scenario: a map with `scenarios` whose
// top-level keys are all a suite's (name, description, scenarios, seeds, fix).
bool is_suite_file(const std::string& path);
std::string suite_table(const SuiteResult& r);
std::string suite_junit(const SuiteResult& r);
nlohmann::json suite_json(const SuiteResult& r);

// Which shard (0-based, of `count`) a case id belongs to: FNV-1a of the id, modulo count. The
// same id lands in the same shard on every machine and run.
int shard_of(const std::string& case_id, int count);
// "I/N" with 1 <= I <= N; throws UsageError naming the option otherwise.
void parse_shard(const std::string& text, int& index, int& count);
// "1,2,3"; throws UsageError for anything but non-negative integers.
std::vector<uint64_t> parse_seeds(const std::string& text);

// Creates `parent/base`, or `parent/base-2`, `-3`, ... when that exists (mkdir fails with EEXIST:
// two suites started in the same second never share a directory). Returns the absolute path.
std::string make_unique_dir(const std::string& parent, const std::string& base);

// --longest-first: the indices of `cases` in launch order: the cases `previous` (a summary's JSON,
// keyed by case id) does not hold first, in their order, then the others by their wall_s there,
// longest first (ties in suite order). `previous` without a `cases` array is an error (UsageError
// naming `source`).
std::vector<size_t> longest_first_order(const std::vector<SuiteCase>& cases,
                                        const nlohmann::json& previous, const std::string& source);

// Median tokens/s of a run's steps (each step at its slowest rank), 0 without steps.
double median_tokens_per_s(const std::string& run_dir);

}  // namespace fl::harness
