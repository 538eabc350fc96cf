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

namespace fl::harness {

struct HistoryEvent {
  uint64_t index = 0;  // position in the history
  int64_t t_ns = 0;    // harness time, ns since the run started
  std::string source;  // rank, harness, injector, detector:<name>, control
  int rank = -1;
  uint64_t seq = 0;  // the source's own counter (rank events)
  int64_t time_unix_ns = 0;
  std::string kind;
  int64_t step = -1;
  std::string data_json = "{}";
  bool late = false;  // recovered from a rank's local file after the stream missed it
};

std::string to_json_line(const HistoryEvent& e);
// Parses one history line; throws nlohmann::json::exception on a malformed one.
HistoryEvent parse_history_line(const std::string& line);
// Every event of a history file; a torn last line (a run killed mid-write) is skipped, and so is
// (counted in *rejected when given) every event the schema check (event_schema.hpp) refuses.
std::vector<HistoryEvent> read_history(const std::string& path, size_t* rejected = nullptr);

class History {
 public:
  explicit History(const std::string& path);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Checks the event (event_schema.hpp), stamps index and harness time, appends, tells
  // listeners. Thread-safe; returns the index, or kRejected for an event the check refused (it
  // is counted, never written).
  static constexpr uint64_t kRejected = UINT64_MAX;
  uint64_t append(HistoryEvent e);
  // A harness event.
  uint64_t harness(const std::string& kind, const nlohmann::json& data, int rank = -1);
  void flush();

  using Listener = std::function<void(const HistoryEvent&)>;
  // Listeners run under the history's lock, in order: keep them short (queue and return).
  // Returns a handle for remove_listener.
  int add_listener(Listener l);
  void remove_listener(int id);
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
  int world_ = 0;  // from run_start: the ranks rank events may carry
  uint64_t rejected_ = 0;
  std::vector<std::string> rejected_reasons_;
};

}  // namespace fl::harness
