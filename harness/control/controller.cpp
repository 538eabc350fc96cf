#include "harness/control/controller.hpp"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/proto/event_proto.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace fl::harness {

namespace pb = faultline::v1;

namespace {

// gRPC metadata a tool the harness started may add: the name the harness gave it
// (FAULTLINE_TOOL_NAME; python/faultline_client sends it), recorded with its diagnoses as `tool`,
// so the run's summary knows which tool posted a diagnosis under a name of its own choosing.
constexpr const char* kToolNameHeader = "faultline-tool";

// What a benchmarked detector must not see: where and when faults were armed, fired, injected or
// healed, and the scenario's expectation.
bool is_ground_truth(const std::string& kind) {
  static const std::set<std::string> k = {"fault_armed",    "fault_fired",  "faults_armed",
                                          "fault_injected", "fault_healed", "fault_failed"};
  return k.count(kind) > 0;
}

pb::Event to_observed(const HistoryEvent& e, bool ground_truth) {
  pb::Event p = to_proto(e);
  if (!ground_truth && e.kind == "run_start") {
    auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (!d.is_discarded()) {
      d.erase("expect");
      d.erase("scenario");
      p.set_data_json(d.dump());
    }
  }
  return p;
}

using WorkerStream = grpc::ServerReaderWriter<pb::WorkerCommand, pb::EventBatch>;

}  // namespace

struct Controller::Impl final : public pb::Controller::Service {
  History& history;
  std::function<ControlResult(const ControlAction&)> on_control;
  const std::string secret;
  std::atomic<uint64_t> rejected{0};
  std::unique_ptr<grpc::Server> server;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::map<int, std::pair<WorkerStream*, std::shared_ptr<std::mutex>>> workers;
  std::map<int, std::set<uint64_t>> seqs;
  std::map<int, uint64_t> drops;
  std::atomic<uint64_t> ingested{0};
  std::condition_variable subs_cv;

  Impl(History& h, std::function<ControlResult(const ControlAction&)> c, std::string s)
      : history(h), on_control(std::move(c)), secret(std::move(s)) {}

  // The caller's secret, compared in constant time; a refusal is counted and says what is
  // missing without echoing anything back.
  grpc::Status authorize(const grpc::ServerContext* ctx) {
    const auto& md = ctx->client_metadata();
    const auto it = md.find(kControlSecretHeader);
    if (it != md.end() && secrets_equal(std::string(it->second.data(), it->second.size()), secret))
      return grpc::Status::OK;
    ++rejected;
    return {grpc::StatusCode::UNAUTHENTICATED,
            it == md.end() ? "the control plane needs the run's secret (metadata faultline-secret; "
                             "FAULTLINE_CONTROL_SECRET or RUN_DIR/control.secret)"
                           : "wrong control-plane secret"};
  }

  grpc::Status Connect(grpc::ServerContext* ctx, WorkerStream* stream) override {
    if (auto st = authorize(ctx); !st.ok()) return st;
    pb::EventBatch batch;
    int rank = -1;
    auto write_mu = std::make_shared<std::mutex>();
    while (!stopping && stream->Read(&batch)) {
      for (int i = 0; rank < 0 && i < batch.events_size(); ++i) {
        if (batch.events(i).rank() < 0) continue;
        rank = batch.events(i).rank();
        std::lock_guard lock(mu);
        workers[rank] = {stream, write_mu};
      }
      ingest(batch);
    }
    if (rank >= 0) {
      std::lock_guard lock(mu);
      auto it = workers.find(rank);
      if (it != workers.end() && it->second.first == stream) workers.erase(it);
    }
    (void)ctx;
    return grpc::Status::OK;
  }

  // One batch of one rank, from its Connect stream or relayed by its host's agent.
  void ingest(const pb::EventBatch& batch) {
    int rank = -1;
    for (const auto& p : batch.events()) {
      if (rank < 0 && p.rank() >= 0) rank = p.rank();
      HistoryEvent e = from_proto(p);
      // A worker speaks for its rank only: the source and the harness's stamps are not its to
      // set (append stamps index and time).
      e.source = "rank";
      e.t_ns = 0;
      history.append(std::move(e));
      std::lock_guard lock(mu);
      seqs[p.rank()].insert(p.seq());
    }
    ingested += static_cast<uint64_t>(batch.events_size());
    if (rank >= 0) {
      std::lock_guard lock(mu);
      uint64_t& d = drops[rank];
      if (batch.dropped_total() > d) d = batch.dropped_total();
    }
  }

  grpc::Status Observe(grpc::ServerContext* ctx, const pb::ObserveRequest* req,
                       grpc::ServerWriter<pb::Event>* writer) override {
    if (auto st = authorize(ctx); !st.ok()) return st;
    std::set<std::string> kinds(req->kinds().begin(), req->kinds().end());
    const bool truth = req->include_ground_truth();
    auto wanted = [&](const HistoryEvent& e) {
      return (kinds.empty() || kinds.count(e.kind)) && (truth || !is_ground_truth(e.kind));
    };
    std::mutex qmu;
    std::condition_variable qcv;
    std::deque<HistoryEvent> q;
    uint64_t dropped = 0;
    constexpr size_t kMax = 1 << 16;
    auto listener = [&](const HistoryEvent& e) {
      if (!wanted(e)) return;
      std::lock_guard lock(qmu);
      if (q.size() >= kMax) {
        ++dropped;
        return;
      }
      q.push_back(e);
      if (q.size() == 1) qcv.notify_one();
    };
    int id = -1;
    auto past = history.snapshot_and_listen(listener, &id);
    bool ok = true;
    if (req->from_start()) {
      for (const auto& e : past) {
        if (!wanted(e)) continue;
        if (!(ok = writer->Write(to_observed(e, truth)))) break;
      }
    }
    while (ok && !ctx->IsCancelled()) {
      std::deque<HistoryEvent> batch;
      {
        std::unique_lock lock(qmu);
        qcv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !q.empty(); });
        batch.swap(q);
      }
      if (batch.empty()) {
        if (stopping) break;
        continue;
      }
      for (size_t i = 0; i < batch.size() && ok; ++i) {
        grpc::WriteOptions wo;
        if (i + 1 < batch.size()) wo.set_buffer_hint();
        ok = writer->Write(to_observed(batch[i], truth), wo);
      }
    }
    history.remove_listener(id);
    if (dropped > 0) {
      history.harness("observer_dropped", {{"peer", ctx->peer()}, {"dropped", dropped}});
    }
    return grpc::Status::OK;
  }

  grpc::Status Report(grpc::ServerContext* ctx, const pb::Diagnosis* d,
                      pb::ReportAck* ack) override {
    if (auto st = authorize(ctx); !st.ok()) return st;
    HistoryEvent e;
    e.source = "detector:" + d->detector();
    e.kind = "diagnosis";
    e.step = d->step();
    e.time_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    nlohmann::json j = {{"detector", d->detector()},
                        {"symptom", d->symptom()},
                        {"ranks", std::vector<int>(d->ranks().begin(), d->ranks().end())},
                        {"confidence", d->confidence()},
                        {"evidence", d->evidence()},
                        {"stage", d->stage()}};
    // The name the harness gave the tool, when its client says it (kToolNameHeader).
    const auto& md = ctx->client_metadata();
    if (const auto it = md.find(kToolNameHeader); it != md.end()) {
      j["tool"] = std::string(it->second.data(), std::min<size_t>(it->second.size(), 200));
    }
    e.data_json = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    ack->set_seq(history.append(std::move(e)));
    return grpc::Status::OK;
  }

  grpc::Status Control(grpc::ServerContext* ctx, const pb::ControlRequest* r,
                       pb::ControlReply* reply) override {
    if (auto st = authorize(ctx); !st.ok()) return st;
    ControlAction a{r->action(),
                    r->rank(),
                    r->signal() == 0 ? 9 : r->signal(),
                    r->plan(),
                    r->checkpoint(),
                    r->requester().empty() ? ctx->peer() : r->requester(),
                    {r->args().begin(), r->args().end()},
                    r->dp()};
    ControlResult res;
    try {
      res = on_control(a);
    } catch (const std::exception& e) {
      res.ok = false;
      res.message = e.what();
    }
    reply->set_ok(res.ok);
    reply->set_message(res.message);
    for (auto& f : res.faults) reply->add_faults(f);
    return grpc::Status::OK;
  }
};

Controller::Controller(History& history,
                       std::function<ControlResult(const ControlAction&)> on_control,
                       std::string secret)
    : impl_(std::make_unique<Impl>(history, std::move(on_control), std::move(secret))) {
  if (impl_->secret.empty()) raise<Error>("control plane: an empty secret");
}

Controller::~Controller() {
  shutdown();
}

std::string Controller::start(const std::string& addr) {
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &port);
  b.RegisterService(impl_.get());
  for (auto* s : extra_) b.RegisterService(s);
  b.SetMaxReceiveMessageSize(64 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kControlKeepaliveTimeMs);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kControlKeepaliveTimeoutMs);
  // The agents ping every 10 s (agent.cpp) even when quiet: never a strike against them.
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  impl_->server = b.BuildAndStart();
  if (!impl_->server) raise<Error>("control plane: cannot listen on {}", addr);
  if (addr.rfind("unix:", 0) == 0) {
    // Only the harness's user may connect (the run directory is 0700 as well).
    if (::chmod(addr.substr(5).c_str(), 0600) != 0) {
      raise<Error>("control plane: cannot make {} 0600: {}", addr.substr(5), strerror(errno));
    }
    return addr;
  }
  const auto colon = addr.rfind(':');
  return fmt::format("{}:{}", addr.substr(0, colon), port);
}

void Controller::shutdown() {
  if (!impl_ || !impl_->server) return;
  impl_->stopping = true;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
  impl_->server.reset();
}

int Controller::send_command(int rank, const std::string& action, const std::string& plan,
                             uint64_t seed) {
  pb::WorkerCommand cmd;
  cmd.set_action(action);
  cmd.set_plan(plan);
  cmd.set_seed(seed);
  int n = 0;
  bool direct = false;
  {
    // Under the lock: a stream stays registered (and alive) only while its Connect call runs.
    std::lock_guard lock(impl_->mu);
    for (auto& [r, w] : impl_->workers) {
      if (rank >= 0 && r != rank) continue;
      direct = true;
      std::lock_guard wlock(*w.second);
      n += w.first->Write(cmd) ? 1 : 0;
    }
  }
  // Ranks that stream through their host's agent (one rank: only when not connected here).
  if (relay_commands_ && (rank < 0 || !direct)) n += relay_commands_(rank, cmd);
  return n;
}

std::map<int, std::set<uint64_t>> Controller::received() const {
  std::lock_guard lock(impl_->mu);
  return impl_->seqs;
}

std::map<int, uint64_t> Controller::dropped() const {
  std::lock_guard lock(impl_->mu);
  return impl_->drops;
}

void Controller::ingest(const pb::EventBatch& batch) {
  impl_->ingest(batch);
}

uint64_t Controller::events_ingested() const {
  return impl_->ingested;
}

uint64_t Controller::rejected() const {
  return impl_->rejected;
}

}  // namespace fl::harness
