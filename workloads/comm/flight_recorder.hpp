// Per-rank flight recorder: a fixed-size ring of the most recent communication ops with their
// state and times. Dumped when an op times out or on demand (SIGUSR2, sent by the harness when it
// declares a hang), so a post-mortem shows what every rank was doing: as faultline's own JSON and
// in PyTorch's Flight Recorder schema (pickle + JSON, see fr_pytorch.cpp and docs/comm.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
  // Filled by the communicator for the PyTorch-schema dump.
  int pg_id = -1;       // process-group id of `group` (see FlightRecorder::register_group)
  int group_rank = -1;  // this rank in `group`
  int group_size = 0;
  int64_t timeout_ms = 0;
  // Filled by record(): c10d's per-group counters on this rank. collective_seq_id counts the
  // collectives this rank issued on the group (from 1; p2p ops carry the current value),
  // p2p_seq_id the send/recv ops, op_id all ops.
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;
  int thread_id = 0;  // kernel thread id of the caller
};

// A communicator group as PyTorch's Flight Recorder names it: `name` (the pg_config key and
// process_group[0]) is the id as a string, `desc` the group's name ("default_pg" for the world),
// `ranks` the world ranks of its members in group-rank order.
struct ProcessGroupInfo {
  int id = -1;
  std::string name;
  std::string desc;
  std::vector<int> ranks;
  int64_t last_enqueued = -1;  // collective_seq_id of the last collective recorded / started /
  int64_t last_started = -1;   // completed on this group
  int64_t last_completed = -1;
  int64_t collective_seq = 0;
  int64_t p2p_seq = 0;
  int64_t op_seq = 0;
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

  // Writes {"rank":..,"entries":[..]} atomically (temp file + rename) as
  // flight_recorder_rank<rank>.json, and the same ring in PyTorch's schema as
  // nccl_trace_rank_<rank> (pickle) and fr_trace_rank_<rank>.json; returns the first path.
  std::string dump(const std::string& dir, int rank, const std::string& reason) const;

  // Process-group ids are handed out in the order groups are created, which every rank of a
  // program shares (the world first, then each split), as c10d numbers its process groups.
  int reserve_pg_id();
  void register_group(int id, const std::string& desc, std::vector<int> world_ranks);
  std::vector<ProcessGroupInfo> groups() const;

  // The ring and groups in PyTorch's Flight Recorder schema (the dict fr_trace unpickles;
  // process_group values are tuples in the pickle, arrays here).
  nlohmann::json pytorch_trace() const;

  // From now on SIGUSR2 makes this process write this recorder's dumps (reason "on demand"),
  // from a watcher thread; the handler only writes to a pipe. Writes
  // <dir>/fr_dump_on_signal (this pid) so the harness knows the rank takes the signal (only
  // when FAULTLINE_RUN_ID is set, i.e. under the harness).
  // Idempotent; the latest recorder armed is the one dumped.
  static void enable_dump_on_signal(std::shared_ptr<FlightRecorder> recorder, std::string dir,
                                    int rank);

  // Called (outside the lock) whenever an entry changes state; telemetry hooks in here.
  void set_listener(std::function<void(const FlightEntry&)> listener);

  static int64_t now_us();

 private:
  // Writes nccl_trace_rank_<rank> and fr_trace_rank_<rank>.json into `dir`; "" or an error.
  std::string write_pytorch_dump(const std::string& dir, int rank) const;

  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 0;
  int next_pg_id_ = 0;
  std::map<int, ProcessGroupInfo> groups_;
  std::function<void(const FlightEntry&)> listener_;
};

}  // namespace fl::comm
