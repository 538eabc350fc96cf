// `faultline shrink RUN_DIR`: a run that shows a property violation is reduced to a minimal
// scenario that still shows it, in the spirit of Jepsen's and QuickCheck's shrinking: ddmin over
// its faults (ddmin.hpp), then fewer ranks, fewer steps and a smaller model, each step kept only
// when a real run of the smaller scenario shows the same violation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fl::harness::campaign {

// The violations a run records, in the order shrink looks for one:
//   no_verdict          verdict.json missing or still `running`, a harness error, or outcome
//                       unknown (the oracle could not decide);
//   recovery_failed     the scenario has a recovery tool and its last incarnation did not
//                       finish cleanly on every rank (score_recovery's `recovered`);
//   detector_missed:D   the run is a positive (its symptom reproduced: verdict pass) and
//                       detector D ran but diagnosed none of the symptoms that showed (for an
//                       `any` / `all` expectation: those of its entries that pass);
//   expectation_failed  verdict fail: the expectation did not hold (for a scenario that expects
//                       a clean run, something failed it).
const std::vector<std::string>& property_names();

// The violation `run_dir` shows: `property` ("" : the first that holds, in the order above;
// "detector_missed" matches any detector), or "" when it shows none. *why gets a sentence.
std::string violation_of(const std::string& run_dir, const std::string& property,
                         std::string* why = nullptr);

struct ShrinkOptions {
  std::string run_dir;
  std::string out_file;  // "" : WORK/minimal.yaml
  std::string work_dir;  // "" : a new RUN_DIR-shrink beside the run
  std::string property;  // "" : the first violation the run shows
  int max_runs = 40;
  std::string faultline_bin;  // "" : this program
  bool progress = true;
};

struct ShrinkResult {
  std::string property, why, out_file, work_dir;
  int runs = 0;  // runs of candidate scenarios
  bool budget_exhausted = false;
  size_t faults_before = 0, faults_after = 0;
  int ranks_before = 0, ranks_after = 0;
  int64_t steps_before = 0, steps_after = 0;
  std::string model_before, model_after;
  std::vector<std::string> log;  // one line per candidate: what changed, kept or not
  std::string text() const;
};

// Throws Error (or ScenarioError) for a directory that is not a finished run or shows no
// violation; the scenario it writes loads with faultline run.
ShrinkResult shrink_run(const ShrinkOptions& o);

}  // namespace fl::harness::campaign
