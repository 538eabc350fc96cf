// The run history: one append-only JSONL file holding every event of a run in the order the
// harness received it — rank telemetry, worker output, launches, exits, faults, diagnoses and
// control actions. Oracles and scorers read only this file, so a run can be judged again offline.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/event.hpp"

namespace fl::harness {

// The history's events are the run's one event type (base/event.hpp): the same value a rank
// emits, with the history's index, time and late flag, written as EventLine::kHistory lines.
using HistoryEvent = fl::Event;

// Every event of a history file; a torn last line (a run killed mid-write) is skipped, and so is
// (counted in *rejected when given) every event the schema check (event_schema.hpp) refuses.
std::vector<HistoryEvent> read_history(const std::string& path, size_t* rejected = nullptr);

class History {
 public:
  explicit History(const std::string& path);
  // Appends to `fd` (opened by the caller, e.g. relative to the run directory's descriptor), which
  // it then owns; `path` names it in errors.
  History(int fd, const std::string& path);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Checks the event (event_schema.hpp), stamps index and harness time, appends, tells
  // listeners. Thread-safe; returns the index, or kRejected for an event the check refused (it
  // is counted, never written).
  static constexpr uint64_t kRejected = UINT64_MAX;
  uint64_t append(HistoryEvent e);
  // Counts, with its reason, a line that never became an event (not JSON, nested too deep, too
  // long: base/json_bounded.hpp), as append counts an event the check refused.
  void refuse(std::string why);
  // A harness event.
  uint64_t harness(const std::string& kind, const nlohmann::json& data, int rank = -1);
  void flush();
  // An offline replay (score/offline.cpp) runs the clock `rate` times faster from now on (the
  // time so far is kept), and appends recorded events at their recorded times.
  // With `from_ns` >= 0 the clock reads that now.
  void set_clock_rate(double rate, int64_t from_ns = -1);
  uint64_t append_at(HistoryEvent e, int64_t t_ns);

  using Listener = std::function<void(const HistoryEvent&)>;
  // Listeners run under the history's lock, in order: keep them short (queue and return).
  // Returns a handle for remove_listener.
  int add_listener(Listener l);
  void remove_listener(int id);
  // Listeners installed now (an Observe stream holds one while it is open).
  size_t listener_count() const;
  // Everything appended so far (Observe's replay), and the listener installed atomically with it.
  std::vector<HistoryEvent> snapshot_and_listen(Listener l, int* id);

  // Everything appended so far (the file's content, without reading it back).
  std::vector<HistoryEvent> events() const;
  int64_t now_ns() const;
  uint64_t size() const;
  // Events refused so far, and the reasons of the first few.
  uint64_t rejected() const;
  std::vector<std::string> rejected_reasons() const;

 private:
  std::FILE* file_ = nullptr;
  mutable std::mutex mu_;
  std::vector<HistoryEvent> events_;
  std::vector<std::pair<int, Listener>> listeners_;
  int next_listener_ = 0;
  int64_t t0_;
  double rate_ = 1;        // set_clock_rate: harness ns per monotonic ns after...
  int64_t rate_from_ = 0;  // ...this monotonic time, at which the clock read...
  int64_t rate_base_ = 0;  // ...this
  uint64_t append_locked(HistoryEvent e, int64_t t_ns);
  int world_ = 0;  // from run_start: the ranks rank events may carry
  uint64_t rejected_ = 0;
  std::vector<std::string> rejected_reasons_;
};

}  // namespace fl::harness
