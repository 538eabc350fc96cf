// What a run history accepts. Anything that reaches the control plane can send events, so every
// event is checked where it enters a history (History::append) and again where a history is read
// back (read_history): the envelope (source, kind, rank, step), the data being one JSON object,
// and per kind of rank event the fields the oracles, the report and the detectors read, with their
// types. A rejected event is counted and dropped, never written. Accepted events leave with their
// text valid UTF-8 and their data re-serialised on one line.
#pragma once

#include <optional>
#include <string>

#include "harness/history/history.hpp"

namespace fl::harness {

// The world the ranks of a history live in: learnt from the harness's `run_start` (its `ranks`).
// Until then (world 0) a live history accepts no rank event (ranks are launched after
// run_start); a history read back without a run_start (written by something else) accepts ranks
// 0-4095.
struct EventContext {
  int world = 0;
  bool live = false;  // History::append: events arriving now
};

// Checks `e` (and normalises it in place: valid UTF-8, compact data). Returns why it is rejected,
// or nothing when accepted. A harness `run_start` it accepts sets ctx.world.
std::optional<std::string> check_event(HistoryEvent& e, EventContext& ctx);

}  // namespace fl::harness
