// `faultline triage --eval CORPUS`: triage on each labelled issue's error_lines + env_lines only
// (never its labels), and accuracy against the labels.
#pragma once

#include <string>

#include "harness/triage/triage.hpp"

namespace fl::triage {

struct EvalOptions {
  std::string corpus, split = "tune";  // "tune", "test" or "all"
  double min_top1 = 0, min_top3 = 0, min_stage = 0, min_root_cause = 0;
  bool verbose = false;  // one line per issue
};

struct EvalCounts {
  int issues = 0, skipped = 0;  // skipped: no input lines at all
  int top1 = 0, top3 = 0, stage = 0, root_cause = 0;
  int failures = 0, failures_answered = 0;  // labelled failures, and those triage answered
  int nones = 0, nones_right = 0;           // labelled non-failures, and those it declined
};

// Throws SignatureError on an unreadable corpus line ("corpus:line: problem").
EvalCounts evaluate(const Tables& t, const EvalOptions& o, std::string* table);
// 0 when every threshold is met, 1 otherwise (the table says which).
int run_eval(const Tables& t, const EvalOptions& o);

}  // namespace fl::triage
