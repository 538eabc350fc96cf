#include "workloads/telemetry/telemetry.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>
#include "injector/site.hpp"

namespace fl::telemetry {

namespace {

int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Emitter {
 public:
  Emitter(int rank, Options o) : rank_(rank), opt_(std::move(o)) {
    if (!opt_.events_file.empty()) {
      file_ = std::fopen(opt_.events_file.c_str(), "a");
      if (file_ == nullptr) {
        spdlog::warn("telemetry: cannot open events file {}: {}", opt_.events_file,
                     std::strerror(errno));
      }
    }
    transport_ = std::move(opt_.transport);
    if (!transport_ && !opt_.control_addr.empty()) {
      std::string why;
      transport_ = connect_transport(opt_.control_addr, rank_, opt_.on_command, &why);
      if (!transport_) {
        spdlog::warn("telemetry: rank {} streams nothing to {} ({}); events stay in {}", rank_,
                     opt_.control_addr, why,
                     opt_.events_file.empty() ? "no file" : opt_.events_file);
      }
    }
    connected_ = transport_ != nullptr;
    if (transport_) sender_ = std::thread([this] { send_loop(); });
    if (opt_.heartbeat_ms > 0) heart_ = std::thread([this] { heartbeat_loop(); });
  }

  ~Emitter() { shutdown(std::chrono::milliseconds(0)); }

  void emit(std::string_view kind, std::string data, int64_t step) {
    Event e;
    e.source = "rank";
    e.rank = rank_;
    e.time_unix_ns = now_unix_ns();
    e.kind = kind;
    e.step = step >= 0 ? step : fault::current_step();
    // The injector's step is negative while an inference reads its prompt (plans count from the
    // first generated token); an event's step is -1 (none) or more.
    if (e.step < -1) e.step = -1;
    e.data_json = std::move(data);
    {
      std::lock_guard lock(file_mu_);
      e.seq = next_seq_++;
      if (file_ != nullptr) {
        const std::string line = to_json_line(e, EventLine::kRank);
        std::fwrite(line.data(), 1, line.size(), file_);
        // Step boundaries, errors and exits reach the disk at once; the rest within a heartbeat.
        if (kind != "collective") std::fflush(file_);
      }
    }
    if (!connected_.load(std::memory_order_relaxed)) return;
    bool wake = false;
    {
      std::lock_guard lock(q_mu_);
      if (queue_.size() >= opt_.queue_size) {
        ++dropped_;
        return;
      }
      wake = queue_.empty();
      queue_.push_back(std::move(e));
    }
    if (wake) q_cv_.notify_one();
  }

  void shutdown(std::chrono::milliseconds drain) {
    {
      std::lock_guard lock(q_mu_);
      if (stopping_) return;
      stopping_ = true;
      drain_until_ = std::chrono::steady_clock::now() + drain;
    }
    q_cv_.notify_all();
    hb_cv_.notify_all();
    if (sender_.joinable()) sender_.join();
    if (heart_.joinable()) heart_.join();
    if (transport_) transport_->close();
    std::lock_guard lock(file_mu_);
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
  }

  Stats stats() {
    Stats s;
    {
      std::lock_guard lock(file_mu_);
      s.emitted = next_seq_;
    }
    std::lock_guard lock(q_mu_);
    s.sent = sent_;
    s.dropped = dropped_;
    s.connected = connected_;
    return s;
  }

 private:
  void send_loop() {
    std::vector<Event> batch;
    for (;;) {
      uint64_t dropped = 0;
      {
        std::unique_lock lock(q_mu_);
        q_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && (queue_.empty() || std::chrono::steady_clock::now() > drain_until_)) {
          dropped_ += queue_.size();
          queue_.clear();
          return;
        }
        const size_t n = std::min<size_t>(queue_.size(), 512);
        batch.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.begin() + static_cast<long>(n)));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
        dropped = dropped_;
      }
      const bool ok = transport_->send(batch, dropped);
      std::lock_guard lock(q_mu_);
      if (!ok) {
        // The control plane is gone: stop streaming, count what was queued as dropped.
        connected_ = false;
        dropped_ += batch.size() + queue_.size();
        queue_.clear();
        return;
      }
      sent_ += batch.size();
    }
  }

  void heartbeat_loop() {
    std::unique_lock lock(q_mu_);
    while (!stopping_) {
      if (hb_cv_.wait_for(lock, std::chrono::milliseconds(opt_.heartbeat_ms),
                          [&] { return stopping_; })) {
        break;
      }
      lock.unlock();
      emit("heartbeat", "{}", -1);
      {
        std::lock_guard flock(file_mu_);
        if (file_ != nullptr) std::fflush(file_);
      }
      lock.lock();
    }
  }

  const int rank_;
  Options opt_;
  std::unique_ptr<Transport> transport_;
  std::atomic<bool> connected_{false};

  std::mutex file_mu_;
  std::FILE* file_ = nullptr;
  uint64_t next_seq_ = 0;

  std::mutex q_mu_;
  std::condition_variable q_cv_, hb_cv_;
  std::deque<Event> queue_;
  uint64_t sent_ = 0, dropped_ = 0;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point drain_until_{};

  std::thread sender_, heart_;
};

std::mutex g_mu;
std::unique_ptr<Emitter> g_emitter;
std::atomic<Emitter*> g_active{nullptr};

}  // namespace

Options options_from_env() {
  Options o;
  o.events_file = kEventsFile.get();
  o.control_addr = kControlAddr.get();
  o.queue_size = static_cast<size_t>(std::max<int64_t>(1, kQueueSize.get()));
  o.heartbeat_ms = kHeartbeatMs.get();
  return o;
}

void start(int rank, Options options) {
  std::lock_guard lock(g_mu);
  if (g_emitter) return;
  g_emitter = std::make_unique<Emitter>(rank, std::move(options));
  g_active.store(g_emitter.get(), std::memory_order_release);
}

bool started() {
  return g_active.load(std::memory_order_acquire) != nullptr;
}

void emit(std::string_view kind, const nlohmann::json& data, int64_t step) {
  Emitter* e = g_active.load(std::memory_order_acquire);
  if (e == nullptr) return;
  e->emit(kind, data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), step);
}

void stop(std::chrono::milliseconds drain) {
  std::unique_ptr<Emitter> e;
  {
    std::lock_guard lock(g_mu);
    e = std::move(g_emitter);
  }
  if (!e) return;
  e->shutdown(drain);
  g_active.store(nullptr, std::memory_order_release);
  // Another thread may still be inside emit(): keep the object (a few hundred bytes) alive.
  static std::vector<std::unique_ptr<Emitter>> retired;
  std::lock_guard lock(g_mu);
  retired.push_back(std::move(e));
}

Stats stats() {
  Emitter* e = g_active.load(std::memory_order_acquire);
  return e != nullptr ? e->stats() : Stats{};
}

}  // namespace fl::telemetry
