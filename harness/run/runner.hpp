// One run of a scenario, start to verdict: run directory, control plane, launch (local or
// mpirun), supervision, out-of-process faults, control actions, teardown, the merge of the ranks'
// local event files, the oracle's verdict and the one-screen summary.
#pragma once

#include <string>

#include "harness/model/scenario.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness {

struct RunOptions {
  std::string results_dir = "results/runs";
  // "": the unix socket RUN_DIR/control.sock (through a short /tmp/faultline-control-* link when
  // its path is too long); HOST:PORT for TCP (still with the secret).
  std::string control_addr;
  bool shared_run_dir = false;  // run directory 0755 instead of 0700 (secret and socket stay 0600)
  std::string run_id;           // empty: <time>-<name>-<random>
  // Accept a results directory that another user can write (or that is owned by one), with a
  // warning; refused otherwise (check_private_dir, base/private_dir.hpp).
  bool allow_shared_results = false;
  bool print_summary = true;
  // Print the header at once and then each notable event as it happens (faultline run without
  // -q); the summary then leaves out the header's lines.
  bool print_events = false;
  bool fix = false;  // recorded in the run (the scenario was loaded with its fix applied)
  // Tools started beside the run, on top of the scenario's `detectors:` and `recovery:`
  // (docs/detectors.md): baseline names, "baseline", or command lines.
  std::vector<std::string> detectors;
  std::string recovery;  // overrides the scenario's when set
  // The live Prometheus endpoint (docs/reports.md#live-metrics): "" off, else IPV4:PORT to listen
  // on (port 0: a free one; written to RUN_DIR/metrics.addr). Requests need `metrics_secret`,
  // or the run's control secret when that is empty.
  std::string metrics_listen;
  std::string metrics_secret;
  // Called once the control plane listens (tests and tools attach here).
  std::function<void(const std::string& control_addr, const std::string& run_dir)> on_ready;
};

struct RunResult {
  std::string run_dir;
  std::string control_addr;
  Verdict verdict;
  std::string harness_error;  // set when the harness itself failed (exit 2)
  int exit_code = 2;          // 0 pass, 1 fail, 2 harness/input error, 3 unknown, 4 interrupted
};

// The exit status of a verdict's outcome: 0 pass, 1 fail, 3 unknown, 4 interrupted (the harness
// got SIGINT/SIGTERM before the run ended).
int outcome_exit_code(const std::string& outcome);

// What this machine must offer a scenario, checked before anything of a run exists, by `run` and
// `validate` alike: a CUDA device for workload.device cuda, workload.command's program, a layout
// the workers accept (layout_check.hpp).
// ScenarioError naming the file and the key.
void check_runnable_here(const Scenario& scenario);

RunResult run_scenario(const Scenario& scenario, const RunOptions& options);

// A run's history with the rank events that only its ranks' own files hold (ranks/rankN/
// events.jsonl): what a harness killed before its final merge never wrote. Recovered events are
// marked late and placed at the time the rank stamped them; `recovered` counts them and
// `rank_events` counts every distinct rank event of the result.
struct RecoveredHistory {
  std::vector<HistoryEvent> events;
  int recovered = 0;
  int rank_events = 0;
};
RecoveredHistory history_with_rank_files(const std::string& run_dir);

// Re-judges a finished (or killed) run from its history and its ranks' event files (see
// history_with_rank_files); rewrites nothing. `seen` (optional) gets what was judged.
Verdict judge_run_dir(const std::string& run_dir, RecoveredHistory* seen = nullptr);

// The scenario of a finished run with its in-process plans replaced by the replay of what fired
// (every rank's fired.jsonl): running it fires the same sites at the same evaluations, with no
// random choice left. Out-of-process faults stay as they were.
Scenario replay_scenario(const std::string& run_dir);

// Writes `text` to `path` atomically (temp file in the same directory, then rename).
void write_atomic(const std::string& path, const std::string& text);

}  // namespace fl::harness
