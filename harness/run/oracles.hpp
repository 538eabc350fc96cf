// Oracles: pure functions of a run's history that say whether the expected behaviour happened.
// The same history always gives the same verdict, so `faultline verdict <run dir>` re-judges a
// run offline. "pass" means the expectation held: for a fault scenario, that the symptom showed
// (and in time, on the expected ranks); for `completed`, that every rank finished cleanly.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/run/history.hpp"
#include "harness/scenario/scenario.hpp"

namespace fl::harness {

struct Verdict {
  std::string outcome;  // pass, fail, unknown
  std::string oracle;
  std::string symptom;
  std::string explanation;   // one sentence: what was (not) observed, where and when
  double manifested_s = -1;  // seconds from the first launch; -1: not observed
  int64_t step = -1;
  std::vector<int> ranks;
  nlohmann::json to_json() const;
};

Verdict judge(const Expect& expect, const std::vector<HistoryEvent>& history);

// Names of every oracle (scenario validation uses the same list).
const std::vector<std::string>& oracle_names();

// True once `history` shows a hang per `expect` (the runner ends such runs early).
bool hang_observed(const Expect& expect, const std::vector<HistoryEvent>& history, int64_t now_ns);

}  // namespace fl::harness
