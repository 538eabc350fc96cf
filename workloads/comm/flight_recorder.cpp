#include "workloads/comm/flight_recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace fl::comm {

std::string_view state_name(OpState s) {
  switch (s) {
    case OpState::kScheduled:
      return "scheduled";
    case OpState::kStarted:
      return "started";
    case OpState::kCompleted:
      return "completed";
    case OpState::kTimedOut:
      return "timed-out";
    case OpState::kFailed:
      return "failed";
    case OpState::kSkipped:
      return "skipped";
  }
  return "?";
}

nlohmann::json to_json(const FlightEntry& e) {
  nlohmann::json j = {{"id", e.id},
                      {"op", op_name(e.op)},
                      {"group", e.group},
                      {"seq", e.seq},
                      {"count", e.count},
                      {"dtype", dtype_name(e.dtype)},
                      {"state", state_name(e.state)},
                      {"t_scheduled_us", e.t_scheduled_us},
                      {"t_started_us", e.t_started_us},
                      {"t_completed_us", e.t_completed_us}};
  if (e.op == OpKind::kAllReduce || e.op == OpKind::kReduceScatter) {
    j["reduce"] = reduce_name(e.reduce);
  }
  if (e.peer >= 0) j[e.op == OpKind::kBroadcast ? "root" : "peer"] = e.peer;
  return j;
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
  ring_.reserve(capacity_);
}

int64_t FlightRecorder::now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {
bool is_p2p(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kRecv;
}
int this_thread_id() {
  thread_local const int tid = static_cast<int>(::gettid());
  return tid;
}
}  // namespace

int FlightRecorder::reserve_pg_id() {
  std::lock_guard lock(mu_);
  return next_pg_id_++;
}

void FlightRecorder::register_group(int id, const std::string& desc, std::vector<int> world_ranks) {
  std::lock_guard lock(mu_);
  ProcessGroupInfo& g = groups_[id];
  g.id = id;
  g.name = std::to_string(id);
  g.desc = desc;
  g.ranks = std::move(world_ranks);
  if (id >= next_pg_id_) next_pg_id_ = id + 1;
}

std::vector<ProcessGroupInfo> FlightRecorder::groups() const {
  std::lock_guard lock(mu_);
  std::vector<ProcessGroupInfo> out;
  for (const auto& [id, g] : groups_) out.push_back(g);
  return out;
}

uint64_t FlightRecorder::record(FlightEntry entry) {
  std::function<void(const FlightEntry&)> listener;
  {
    std::lock_guard lock(mu_);
    entry.id = next_id_++;
    if (entry.t_scheduled_us == 0) entry.t_scheduled_us = now_us();
    entry.thread_id = this_thread_id();
    if (auto it = groups_.find(entry.pg_id); it != groups_.end()) {
      ProcessGroupInfo& g = it->second;
      entry.op_id = ++g.op_seq;
      if (is_p2p(entry.op)) {
        entry.p2p_seq_id = ++g.p2p_seq;
        entry.collective_seq_id = g.collective_seq;
      } else {
        entry.collective_seq_id = ++g.collective_seq;
        entry.p2p_seq_id = g.p2p_seq;
        g.last_enqueued = entry.collective_seq_id;
      }
    }
    if (ring_.size() < capacity_) {
      ring_.push_back(entry);
    } else {
      ring_[entry.id % capacity_] = entry;
    }
    listener = listener_;
  }
  if (listener) listener(entry);
  return entry.id;
}

void FlightRecorder::set_state(uint64_t id, OpState state) {
  FlightEntry copy;
  std::function<void(const FlightEntry&)> listener;
  {
    std::lock_guard lock(mu_);
    if (id + capacity_ < next_id_) return;  // already overwritten
    FlightEntry& e = ring_[id % capacity_];
    if (e.id != id) return;
    e.state = state;
    int64_t t = now_us();
    if (state == OpState::kStarted) {
      e.t_started_us = t;
    } else if (state != OpState::kScheduled) {
      e.t_completed_us = t;
    }
    if (auto it = groups_.find(e.pg_id); it != groups_.end() && !is_p2p(e.op)) {
      if (state == OpState::kStarted) {
        it->second.last_started = std::max(it->second.last_started, e.collective_seq_id);
      } else if (state == OpState::kCompleted) {
        it->second.last_completed = std::max(it->second.last_completed, e.collective_seq_id);
      }
    }
    copy = e;
    listener = listener_;
  }
  if (listener) listener(copy);
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<FlightEntry> out;
  out.reserve(ring_.size());
  uint64_t first = next_id_ > capacity_ ? next_id_ - capacity_ : 0;
  for (uint64_t id = first; id < next_id_; ++id) out.push_back(ring_[id % capacity_]);
  return out;
}

void FlightRecorder::set_listener(std::function<void(const FlightEntry&)> listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
}

std::string FlightRecorder::dump(const std::string& dir, int rank,
                                 const std::string& reason) const {
  nlohmann::json j;
  j["rank"] = rank;
  j["pid"] = static_cast<int>(::getpid());
  j["reason"] = reason;
  j["dumped_at_us"] = now_us();
  j["capacity"] = capacity_;
  auto entries = nlohmann::json::array();
  for (const auto& e : snapshot()) entries.push_back(to_json(e));
  j["entries"] = std::move(entries);

  std::filesystem::path d =
      dir.empty() ? std::filesystem::current_path() : std::filesystem::path(dir);
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  auto path = d / fmt::format("flight_recorder_rank{}.json", rank);
  auto tmp = d / fmt::format(".flight_recorder_rank{}.json.{}", rank, ::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << '\n';
    out.flush();
    if (!out) return "(flight recorder dump failed: cannot write " + tmp.string() + ")";
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return "(flight recorder dump failed: " + ec.message() + ")";
  // The same ring in PyTorch's schema, for fr_trace and other tools that read c10d's dumps.
  if (std::string err = write_pytorch_dump(d.string(), rank); !err.empty()) {
    return std::filesystem::absolute(path).string() + " (" + err + ")";
  }
  return std::filesystem::absolute(path).string();
}

}  // namespace fl::comm
