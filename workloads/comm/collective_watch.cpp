#include "workloads/comm/collective_watch.hpp"

#include <chrono>

#include <fmt/format.h>

#include "base/error.hpp"
#include "workloads/telemetry/telemetry.hpp"

namespace fl::comm {

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void emit(const FlightEntry& e, int64_t in_flight_ms) {
  nlohmann::json d = {{"op", op_name(e.op)},
                      {"group", e.group},
                      {"seq", e.seq},
                      {"count", e.count},
                      {"dtype", dtype_name(e.dtype)},
                      {"peer", e.peer},
                      {"state", state_name(e.state)}};
  if (in_flight_ms >= 0) d["in_flight_ms"] = in_flight_ms;
  telemetry::emit("collective", d);
}

}  // namespace

std::shared_ptr<CollectiveWatch> CollectiveWatch::install(FlightRecorder& recorder) {
  const std::string mode = kCollectiveEvents.get();
  if (mode != "all" && mode != "stalls" && mode != "off") {
    raise<SettingError>(
        "FAULTLINE_TELEMETRY_COLLECTIVES='{}' is not allowed (allowed: all, "
        "stalls, off)",
        mode);
  }
  if (mode == "off") return nullptr;
  std::shared_ptr<CollectiveWatch> w(new CollectiveWatch(mode == "all", kStallMs.get()));
  recorder.set_listener([w](const FlightEntry& e) { w->on_change(e); });
  return w;
}

CollectiveWatch::CollectiveWatch(bool all, int64_t stall_ms) : all_(all), stall_ms_(stall_ms) {
  if (!all_) thread_ = std::thread([this] { loop(); });
}

CollectiveWatch::~CollectiveWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatch::on_change(const FlightEntry& e) {
  if (all_) {
    emit(e, -1);
    return;
  }
  bool report_end = false;
  {
    std::lock_guard lock(mu_);
    if (e.state == OpState::kScheduled || e.state == OpState::kStarted) {
      auto& o = open_[e.id];
      o.entry = e;
      return;
    }
    auto it = open_.find(e.id);
    report_end = it != open_.end() && it->second.reported;
    if (it != open_.end()) open_.erase(it);
  }
  // Failures always; a completion only when its stall was reported (the stall is over).
  if (report_end || e.state == OpState::kTimedOut || e.state == OpState::kFailed) emit(e, -1);
}

void CollectiveWatch::loop() {
  std::unique_lock lock(mu_);
  const auto period = std::chrono::milliseconds(std::max<int64_t>(10, stall_ms_ / 4));
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    const int64_t now = now_us();
    for (auto& [id, o] : open_) {
      const int64_t since = o.entry.t_started_us ? o.entry.t_started_us : o.entry.t_scheduled_us;
      const int64_t ms = (now - since) / 1000;
      if (o.reported || since == 0 || ms < stall_ms_) continue;
      o.reported = true;
      emit(o.entry, ms);
    }
  }
}

}  // namespace fl::comm
