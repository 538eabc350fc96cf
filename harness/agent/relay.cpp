#include "harness/agent/relay.hpp"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/private_dir.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace fl::harness {

namespace pb = faultline::v1;

namespace {
using RankStream = grpc::ServerReaderWriter<pb::WorkerCommand, pb::EventBatch>;
}  // namespace

struct TelemetryRelay::Impl final : public pb::Controller::Service {
  std::string dir, host, secret;
  std::string private_dir;  // the socket's own 0700 directory when the run's path is too long
  AgentWrite write;
  std::unique_ptr<grpc::Server> server;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> batches{0}, events{0};
  std::mutex mu;
  std::map<int, std::pair<RankStream*, std::shared_ptr<std::mutex>>> ranks;

  grpc::Status Connect(grpc::ServerContext* ctx, RankStream* stream) override {
    const auto& md = ctx->client_metadata();
    const auto it = md.find(kControlSecretHeader);
    if (it == md.end() ||
        !secrets_equal(std::string(it->second.data(), it->second.size()), secret)) {
      return {grpc::StatusCode::UNAUTHENTICATED, "the agent's relay needs the run's secret"};
    }
    int rank = -1;
    auto wmu = std::make_shared<std::mutex>();
    pb::AgentReport r;
    grpc::Status st = grpc::Status::OK;
    while (!stopping && stream->Read(r.mutable_relay())) {
      const auto& b = r.relay();
      for (int i = 0; rank < 0 && i < b.events_size(); ++i) {
        if (b.events(i).rank() < 0) continue;
        rank = b.events(i).rank();
        std::lock_guard lock(mu);
        ranks[rank] = {stream, wmu};
      }
      const auto n = static_cast<uint64_t>(b.events_size());
      if (!write(r)) {
        st = {grpc::StatusCode::UNAVAILABLE, "the agent lost the harness"};
        break;
      }
      ++batches;
      events += n;
      r.Clear();
    }
    std::lock_guard lock(mu);
    if (auto f = ranks.find(rank); f != ranks.end() && f->second.first == stream) ranks.erase(f);
    return st;
  }
};

TelemetryRelay::TelemetryRelay(std::string run_dir, std::string host, std::string secret,
                               AgentWrite write)
    : impl_(std::make_unique<Impl>()) {
  impl_->dir = std::move(run_dir);
  impl_->host = std::move(host);
  impl_->secret = std::move(secret);
  impl_->write = std::move(write);
}

TelemetryRelay::~TelemetryRelay() {
  stop();
}

std::string TelemetryRelay::start(std::string& why) {
  std::error_code ec;
  const std::string sockdir = impl_->dir + "/agents";
  std::filesystem::create_directories(sockdir, ec);
  std::string sock = sockdir + "/" + impl_->host + ".sock";
  // A unix socket of this host's kernel, 0600: only this user's processes on this host reach it,
  // whatever filesystem the run directory is on. Never loopback TCP, which every user of the host
  // can reach and, once the agent is gone, listen on in its place to collect the secret the
  // host's ranks present: a run path too long for a socket gets a private directory instead.
  if (ec || sock.size() > kUnixSocketPathMax) {
    char tmpl[] = "/tmp/faultline-relay-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      why = fmt::format("cannot make a private directory for the relay's socket in /tmp: {}",
                        std::strerror(errno));
      return "";
    }
    impl_->private_dir = tmpl;
    sock = impl_->private_dir + "/relay.sock";
  }
  const std::string addr = "unix:" + sock;
  grpc::ServerBuilder b;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials());
  b.RegisterService(impl_.get());
  b.SetMaxReceiveMessageSize(64 << 20);
  // Created 0600 from the start (no moment in which the umask's mode lets others connect); no
  // other thread of the agent creates files while it starts.
  const mode_t umask_before = ::umask(077);
  impl_->server = b.BuildAndStart();
  ::umask(umask_before);
  if (!impl_->server) {
    why = fmt::format("cannot listen on {}", addr);
    stop();
    return "";
  }
  if (::chmod(sock.c_str(), 0600) != 0) {
    why = fmt::format("cannot make {} 0600", sock);
    stop();
    return "";
  }
  return addr;
}

int TelemetryRelay::deliver(int rank, const pb::WorkerCommand& cmd) {
  std::lock_guard lock(impl_->mu);
  int n = 0;
  for (auto& [r, w] : impl_->ranks) {
    if (rank >= 0 && r != rank) continue;
    std::lock_guard wlock(*w.second);
    n += w.first->Write(cmd) ? 1 : 0;
  }
  return n;
}

void TelemetryRelay::stop() {
  if (impl_->server) {
    impl_->stopping = true;
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->server->Wait();
    impl_->server.reset();
  }
  if (!impl_->private_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(impl_->private_dir, ec);
    impl_->private_dir.clear();
  }
}

uint64_t TelemetryRelay::batches() const {
  return impl_->batches;
}

uint64_t TelemetryRelay::events() const {
  return impl_->events;
}

Heartbeat::Heartbeat(AgentWrite write, std::chrono::milliseconds interval)
    : write_(std::move(write)), interval_(interval) {
  t_ = std::thread([this] {
    pb::AgentReport beat;
    beat.set_heartbeat(true);
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
      lock.unlock();
      const bool ok = write_(beat);
      lock.lock();
      if (!ok) break;
    }
  });
}

Heartbeat::~Heartbeat() {
  stop();
}

void Heartbeat::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (t_.joinable()) t_.join();
}

}  // namespace fl::harness
