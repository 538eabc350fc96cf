// Per-rank flight recorder: a fixed-size ring of the most recent communication ops with their
// state and times. Dumped as JSON when an op times out, so a post-mortem shows what every rank was
// doing (the same idea as PyTorch's NCCL flight recorder).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "workloads/comm/types.hpp"

namespace fl::comm {

enum class OpState : uint8_t { kScheduled, kStarted, kCompleted, kTimedOut, kFailed, kSkipped };

std::string_view state_name(OpState s);

struct FlightEntry {
  uint64_t id = 0;  // position in this rank's history (monotonic)
  OpKind op = OpKind::kAllReduce;
  std::string group;
  int64_t seq = -1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  int peer = -1;  // p2p peer or broadcast root
  OpState state = OpState::kScheduled;
  int64_t t_scheduled_us = 0;  // wall clock, microseconds since the Unix epoch
  int64_t t_started_us = 0;
  int64_t t_completed_us = 0;  // completion, timeout or failure time
};

nlohmann::json to_json(const FlightEntry& e);

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);

  // Records a new entry and returns its id.
  uint64_t record(FlightEntry entry);
  void set_state(uint64_t id, OpState state);

  // Oldest first; only the entries still in the ring.
  std::vector<FlightEntry> snapshot() const;
  size_t capacity() const { return capacity_; }

  // Writes {"rank":..,"entries":[..]} atomically (temp file + rename); returns the path.
  std::string dump(const std::string& dir, int rank, const std::string& reason) const;

  // Called (outside the lock) whenever an entry changes state; telemetry hooks in here.
  void set_listener(std::function<void(const FlightEntry&)> listener);

  static int64_t now_us();

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 0;
  std::function<void(const FlightEntry&)> listener_;
};

}  // namespace fl::comm
