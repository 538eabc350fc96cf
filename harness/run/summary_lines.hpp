// Lines of a run's summary that say what really happened rather than what was planned: whether
// each in-process plan fired (a plan that never fired is "armed, never fired", with a warning),
// and the layout the ranks reported (their `layout` events), which a fault can change.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/history/history.hpp"

namespace fl::harness {

struct PlanReport {
  std::vector<std::string> lines;     // one per plan: fired where, or armed and never fired
  std::vector<std::string> warnings;  // one per plan that never fired
};
PlanReport plan_report(const std::vector<std::string>& plans,
                       const std::vector<HistoryEvent>& history);

// "4 ranks = dp 4 x tp 1 x pp 1, zero 0" from the last layout event of each rank; ranks that
// disagree are listed. nullopt when no rank reported its layout.
std::optional<std::string> reported_layout(const std::vector<HistoryEvent>& history);

}  // namespace fl::harness
