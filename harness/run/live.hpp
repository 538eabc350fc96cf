// What `faultline run` prints while a run goes (docs/harness.md#run-output): one line per
// notable event as the history receives it — a fault firing (site, rank), the first error of each
// rank, rank exits, restarts, a detector's diagnosis — with the time since the run started. And
// the detectors' conclusions for the final summary.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/history/history.hpp"

namespace fl::harness {

// The printer's memory between events (each rank's first error only).
struct LiveState {
  std::set<int> errored;
};

// The line for `e` ("  +1.234s  rank 2    fault fired: comm.all_reduce (hit 3, delay)"), or
// nothing when the event is not one a person follows (steps, heartbeats, output, late events).
std::optional<std::string> live_line(const HistoryEvent& e, LiveState& state);

// One line per detector and symptom it diagnosed: the ranks it named, its first diagnosis and the
// latency from the first fault (injected or fired) when there was one, and how many it posted.
std::vector<std::string> detector_conclusions(const std::vector<HistoryEvent>& history);

// "0-3", "1,3", "2"
std::string rank_list(const std::vector<int>& ranks);
// "rank 2", "ranks 0-3"
std::string ranks_phrase(const std::vector<int>& ranks);

}  // namespace fl::harness
