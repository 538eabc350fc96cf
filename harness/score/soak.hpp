// `faultline soak`: fault-free runs with decoys only, round after round (a new seed each round,
// `jobs` runs side by side), until a wall-clock budget or a number of training steps is spent,
// with detectors attached; every false alarm is counted against the clean hours the rounds ran
// (docs/benchmarks.md, "Clean soak").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/suite/suite.hpp"

namespace fl::harness {

struct SoakOptions {
  std::string suite = "scenarios/suites/soak.yaml";
  SuiteOptions suite_options;  // jobs, results directory
  std::vector<std::string> detectors{"baseline"};
  double for_s = 0;   // wall-clock budget: no round starts after it (0: none)
  int64_t steps = 0;  // training steps to reach over all runs (0: none)
  int run_steps = 0;  // workload.steps of every run (0: each scenario's own)
  uint64_t first_seed = 1000;
  int max_rounds = 0;  // 0: no limit
};

// "2h", "90m", "45s", "3600" (seconds) -> seconds; throws UsageError otherwise.
double parse_duration(const std::string& text);

// Runs the soak; writes soak.json and soak.md into its directory; returns 0 when every run came
// out clean, 1 otherwise (a run that was not clean is excluded from the scores and named).
int soak(const SoakOptions& o);

}  // namespace fl::harness
