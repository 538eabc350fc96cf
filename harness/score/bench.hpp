// faultline bench-detectors / bench-recovery: run a suite with tools attached, score it, and
// write the leaderboard (terminal table, leaderboard.md, leaderboard.json) into the suite's
// directory.
#pragma once

#include <string>
#include <vector>

#include "harness/suite/suite.hpp"

namespace fl::harness {

struct BenchDetectorsOptions {
  std::string suite;
  SuiteOptions suite_options;
  std::vector<std::string> detectors{"baseline"};
  // A threshold sweep: "hang --floor-s" with values {1, 2, 4}: one more detector per value, all
  // attached to the same runs.
  std::string sweep;
  std::vector<std::string> values;
  // Soak directories (faultline soak) whose clean runs join the scores: their hours back the
  // false-alarm figures.
  std::vector<std::string> soak;
};

// Returns the process exit status: 0 when the leaderboard was written.
int bench_detectors(const BenchDetectorsOptions& o);

// Scores existing runs or suites; prints the table (markdown with `markdown`), with `breakdown`
// recall per stage and symptom, with two `compare` detectors their paired comparison, and writes
// JSON to `json_path` when given.
int score_paths(const std::vector<std::string>& paths, bool markdown, const std::string& json_path,
                const std::vector<std::string>& compare = {}, bool breakdown = false);

struct BenchRecoveryOptions {
  std::string suite;
  SuiteOptions suite_options;
  std::string policy;  // "" : each scenario's own recovery key
};

int bench_recovery(const BenchRecoveryOptions& o);

}  // namespace fl::harness
