#include "harness/agent/hub.hpp"

#include <google/protobuf/any.pb.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "harness/agent/relay.hpp"
#include "harness/agent/silence.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/model/placement.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/hosts.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.grpc.pb.h"

extern "C" char** environ;

namespace fl::harness {

namespace pb = faultline::v1;

namespace {
constexpr int kAttachS = 30;  // an agent attaches within this (an ssh login, a process start)
constexpr int kCallS = 30;    // and answers a command within this (the tools it runs: 20 s)
constexpr int kStopS = 5;
using AgentStream = grpc::ServerReaderWriter<pb::AgentCommand, pb::AgentReport>;
}  // namespace

struct AgentHub::Impl final : public pb::Agents::Service {
  struct Conn {
    std::mutex wmu;                 // guards `stream` and writes to it
    AgentStream* stream = nullptr;  // set while its Attach call runs
    bool attached = false, gone = false;
    bool announced = false;  // its agent_up is in the history (attached alone races that write)
    int pid = 0;
    // The relay and the heartbeat (relay.hpp, silence.hpp).
    std::string relay_addr;
    grpc::ServerContext* ctx = nullptr;  // to cut a silent agent's call
    bool judged = false;                 // lost by silence; its call ends without another event
    int64_t last_ns = 0;                 // its last report (steady clock)
    uint64_t batches = 0, events = 0;    // relayed telemetry ingested from it
    uint64_t agent_batches = 0, agent_events = 0;  // what it said it forwarded (stop's answer)
  };
  struct Result {
    bool ok = false;
    int status = 0;
    std::string output;
  };

  const Scenario& s;
  const std::vector<std::string> hosts;  // the names the agents register as (node k: hosts[k])
  std::string dir;
  History& hist;
  const std::string secret;
  std::vector<std::unique_ptr<Conn>> conns;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Result> results;
  std::atomic<uint64_t> next_id{1};
  bool stopping = false;
  std::string lost;
  std::function<void(const std::string&)> on_lost;
  std::function<void(const pb::EventBatch&)> ingest;  // relayed telemetry into the controller
  SilenceJudge judge{0};
  std::thread watch;
  std::condition_variable watch_cv;

  ~Impl() override {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    watch_cv.notify_all();
    if (watch.joinable()) watch.join();
  }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Judges the agents' silence until stop(): a silent one is lost like one whose connection ended.
  void watch_loop() {
    std::unique_lock lock(mu);
    while (!stopping) {
      watch_cv.wait_for(lock, std::chrono::milliseconds(200));
      if (stopping) break;
      const auto v = judge.judge(now_ns());
      if (!v) continue;
      Conn& c = *conns[v->node];
      judge.forget(v->node);
      c.judged = c.gone = true;
      const std::string reason = silence_reason(*v, hosts);
      const std::string msg =
          fmt::format("the agent on host {} (node {}, pid {}) was lost during the run: {}",
                      hosts[v->node], v->node, c.pid, reason);
      if (lost.empty()) lost = msg;
      cv.notify_all();
      lock.unlock();
      {
        std::lock_guard wlock(c.wmu);
        if (c.ctx) c.ctx->TryCancel();
      }
      hist.harness(
          "agent_lost",
          {{"host", hosts[v->node]}, {"node", v->node}, {"pid", c.pid}, {"reason", reason}});
      if (on_lost) on_lost(msg);
      lock.lock();
    }
  }

  Impl(const Scenario& sc, std::vector<std::string> names, std::string d, History& h,
       std::string sec)
      : s(sc), hosts(std::move(names)), dir(std::move(d)), hist(h), secret(std::move(sec)) {
    for (size_t k = 0; k < hosts.size(); ++k) conns.push_back(std::make_unique<Conn>());
    judge = SilenceJudge(hosts.size());
  }

  // Why a connection that ended, ended (under mu).
  std::string keepalive_reason(int node, const std::string& otherwise) const {
    const double quiet_s =
        static_cast<double>(now_ns() - conns[static_cast<size_t>(node)]->last_ns) / 1e9;
    if (quiet_s * 1000 < kControlKeepaliveTimeMs) return otherwise;
    return fmt::format(
        "no keepalive answer: nothing heard from it for {:.1f} s before its connection was closed",
        quiet_s);
  }

  // A name as a refusal shows it: at most 64 bytes, since a status message travels in a header
  // whose size gRPC limits (a registration with a 200 KB host name came back RESOURCE_EXHAUSTED).
  static std::string shown_host(const std::string& h) {
    return h.size() <= 64 ? h : h.substr(0, 64) + fmt::format("... ({} bytes)", h.size());
  }

  // One agent's call: its registration, then its reports until the connection ends.
  grpc::Status Attach(grpc::ServerContext* ctx, AgentStream* stream) override {
    const auto& md = ctx->client_metadata();
    const auto it = md.find(kControlSecretHeader);
    if (it == md.end() ||
        !secrets_equal(std::string(it->second.data(), it->second.size()), secret)) {
      return {grpc::StatusCode::UNAUTHENTICATED, "an agent needs the run's secret"};
    }
    pb::AgentReport reg;
    if (!stream->Read(&reg)) return grpc::Status::OK;
    int node = -1;
    for (size_t k = 0; k < hosts.size(); ++k) {
      if (hosts[k] == reg.host()) node = static_cast<int>(k);
    }
    if (node < 0) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              fmt::format("host '{}' is not one of the run's hosts", shown_host(reg.host()))};
    }
    if (grpc::Status st = attach(ctx, stream, reg, node); !st.ok()) return st;
    read_reports(stream, node);
    return detach(reg, node);
  }

  // Takes host `node`'s place for this call (one agent per host) and records its agent_up.
  grpc::Status attach(grpc::ServerContext* ctx, AgentStream* stream, const pb::AgentReport& reg,
                      int node) {
    Conn& c = *conns[static_cast<size_t>(node)];
    {
      std::scoped_lock lock(mu, c.wmu);
      if (c.attached) {
        return {grpc::StatusCode::ALREADY_EXISTS,
                fmt::format("host {} has an agent already", shown_host(reg.host()))};
      }
      c.stream = stream;
      c.ctx = ctx;
      c.attached = true;
      c.pid = reg.pid();
      c.relay_addr = reg.relay_addr();
      c.last_ns = now_ns();
      judge.attach(static_cast<size_t>(node), reg.heartbeat_ms() > 0 ? reg.heartbeat_ms() : 1000,
                   now_ns());
    }
    hist.harness("agent_up", {{"host", reg.host()},
                              {"node", node},
                              {"pid", reg.pid()},
                              {"can", std::vector<std::string>(reg.can().begin(), reg.can().end())},
                              {"peer", ctx->peer()},
                              {"relay", reg.relay_addr()},
                              {"heartbeat_ms", reg.heartbeat_ms()}});
    {
      std::lock_guard lock(mu);
      c.announced = true;
    }
    cv.notify_all();
    return grpc::Status::OK;
  }

  // Relayed telemetry, answers to commands and heartbeats, until the stream ends or the agent
  // was judged lost by its silence.
  void read_reports(AgentStream* stream, int node) {
    Conn& c = *conns[static_cast<size_t>(node)];
    pb::AgentReport r;
    while (stream->Read(&r)) {
      {
        std::lock_guard lock(mu);
        if (c.judged) break;
        c.last_ns = now_ns();
        judge.heard(static_cast<size_t>(node), c.last_ns);
      }
      if (r.has_relay()) {
        // In the order the agent read them, so each rank's order holds; ingested as if direct.
        if (ingest) ingest(r.relay());
        std::lock_guard lock(mu);
        ++c.batches;
        c.events += static_cast<uint64_t>(r.relay().events_size());
        continue;
      }
      std::lock_guard lock(mu);
      if (r.relayed_batches() > 0 || r.relayed_events() > 0) {  // stop's answer (id 0)
        c.agent_batches = r.relayed_batches();
        c.agent_events = r.relayed_events();
      }
      if (r.id() == 0) continue;
      results[r.id()] = Result{r.ok(), r.status(), r.output()};
      cv.notify_all();
    }
    std::lock_guard wlock(c.wmu);
    c.stream = nullptr;
    c.ctx = nullptr;
  }

  // The call ended: stopped (stop() asked), lost (the connection ended on its own) or judged
  // silent (watch_loop recorded it).
  grpc::Status detach(const pb::AgentReport& reg, int node) {
    Conn& c = *conns[static_cast<size_t>(node)];
    bool expected = false;
    std::string msg;
    std::string reason = "connection to the control plane ended";
    nlohmann::json relayed;
    {
      std::lock_guard lock(mu);
      const bool judged = c.judged;
      judge.forget(static_cast<size_t>(node));
      expected = stopping;
      relayed = {{"batches", c.batches},
                 {"events", c.events},
                 {"agent_batches", c.agent_batches},
                 {"agent_events", c.agent_events}};
      if (judged) {
        c.gone = true;
        cv.notify_all();
        return grpc::Status::CANCELLED;  // lost by silence: recorded by watch_loop
      }
      if (!expected) {
        // A connection that ended after a long silence ended by the keepalive (controller.cpp).
        reason = keepalive_reason(node, reason);
        msg = fmt::format("the agent on host {} (node {}, pid {}) was lost during the run: {}",
                          reg.host(), node, c.pid, reason);
        if (lost.empty()) lost = msg;
      }
    }
    // Gone once its event is in the history: stop() returns with every agent_stopped recorded.
    auto gone = [&] {
      {
        std::lock_guard lock(mu);
        c.gone = true;
      }
      cv.notify_all();
    };
    if (expected) {
      hist.harness("agent_stopped",
                   {{"host", reg.host()}, {"node", node}, {"pid", c.pid}, {"relayed", relayed}});
      gone();
    } else {
      gone();
      hist.harness("agent_lost", {{"host", reg.host()},
                                  {"node", node},
                                  {"pid", c.pid},
                                  {"reason", reason},
                                  {"relayed", relayed}});
      if (on_lost) on_lost(msg);
    }
    return grpc::Status::OK;
  }

  // Sends `cmd` to host `node`'s agent and waits for its answer: never longer than kCallS, and
  // no longer than the agent lives.
  Result call(int node, pb::AgentCommand cmd) {
    const std::string& host = hosts.at(static_cast<size_t>(node));
    Conn& c = *conns.at(static_cast<size_t>(node));
    const uint64_t id = next_id++;
    cmd.set_id(id);
    {
      std::lock_guard wlock(c.wmu);
      if (!c.stream || !c.stream->Write(cmd))
        raise<Error>("agent on host {}: not attached (cannot {})", host, cmd.action());
    }
    std::unique_lock lock(mu);
    const bool answered = cv.wait_for(lock, std::chrono::seconds(kCallS),
                                      [&] { return results.count(id) > 0 || c.gone; });
    if (results.count(id)) {
      Result r = std::move(results[id]);
      results.erase(id);
      return r;
    }
    if (!answered)
      raise<Error>("agent on host {}: no answer to {} within {} s", host, cmd.action(), kCallS);
    raise<Error>("agent on host {}: lost before it answered {}", host, cmd.action());
  }
};

AgentHub::AgentHub(const Scenario& s, std::string run_dir, History& hist, std::string secret)
    : AgentHub(s, s.topo.hosts, std::move(run_dir), hist, std::move(secret)) {}

AgentHub::AgentHub(const Scenario& s, std::vector<std::string> hosts, std::string run_dir,
                   History& hist, std::string secret)
    : impl_(std::make_unique<Impl>(s, std::move(hosts), std::move(run_dir), hist,
                                   std::move(secret))) {}

AgentHub::~AgentHub() = default;

grpc::Service* AgentHub::service() {
  return impl_.get();
}

void check_control_reach(const Scenario& s, const std::string& addr) {
  if (addr.rfind("unix:", 0) == 0 || !s.topo.hosts.empty() || s.topo.launcher == "srun") return;
  std::string host = addr.substr(0, addr.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost") return;
  raise<Error>(
      "--control {}: the control plane listens beyond loopback only for a run over "
      "topology.hosts or with launcher srun (and then only with the run's secret); use "
      "127.0.0.1:PORT or the default unix socket",
      addr);
}

std::vector<std::string> agent_words(const std::string& host, const std::string& exe,
                                     const std::string& control_addr, const std::string& dir) {
  // The rsh agent joins the words for a shell on the host (srun reads a multi-program file's
  // words itself): only plain paths, names and addresses.
  static const std::regex plain(R"([A-Za-z0-9/._:=,+@%-]+)");
  for (const auto& w : {exe, control_addr, dir, host}) {
    if (!std::regex_match(w, plain)) {
      raise<Error>(
          "agent: '{}' has characters a shell on the host would read (allowed: letters, digits, "
          "/._:=,+@%-); use a plain --results path and build directory",
          w);
    }
  }
  return {exe, "agent", "--control", control_addr, "--host", host, "--run-dir", dir};
}

std::vector<std::string> agent_command(const Scenario& s, int node, const std::string& exe,
                                       const std::string& control_addr, const std::string& dir) {
  const std::string& host = s.topo.hosts.at(static_cast<size_t>(node));
  return on_host(s, host, agent_words(host, exe, control_addr, dir));
}

void AgentHub::start(Supervisor& sup, const std::string& exe, const std::string& control_addr,
                     const std::function<bool()>& poll,
                     std::function<void(const std::string&)> on_lost, bool allow_shared_results) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (size_t k = 0; k < impl_->hosts.size(); ++k) {
    ProcessSpec p;
    p.name = "agent " + impl_->hosts[k];
    p.argv = agent_command(impl_->s, static_cast<int>(k), exe, control_addr, impl_->dir);
    if (allow_shared_results) p.argv.push_back("--allow-shared-results");
    p.cwd = impl_->dir;
    for (char** e = environ; *e != nullptr; ++e) p.env.push_back(*e);
    pids.push_back(sup.spawn(p));
  }
  wait_attached([&](size_t k) { return sup.is_running(pids[k]); }, control_addr, poll,
                std::move(on_lost), t0);
}

void AgentHub::wait_attached(const std::function<bool(size_t)>& alive,
                             const std::string& control_addr, const std::function<bool()>& poll,
                             std::function<void(const std::string&)> on_lost,
                             std::chrono::steady_clock::time_point t0) {
  impl_->on_lost = std::move(on_lost);
  const auto until = t0 + std::chrono::seconds(kAttachS);
  std::vector<std::string> missing;
  for (;;) {
    // The agents' output reaches helpers.log, their exits are reaped.
    if (!poll()) raise<Error>("agent: the run was stopped before every host's agent attached");
    missing.clear();
    bool waiting = false;
    {
      std::unique_lock lock(impl_->mu);
      impl_->cv.wait_for(lock, std::chrono::milliseconds(50));
      for (size_t k = 0; k < impl_->hosts.size(); ++k) {
        const auto& c = *impl_->conns[k];
        if (c.attached && c.announced && !c.gone) continue;
        if (c.gone || !alive(k)) {
          missing.push_back(
              fmt::format("{} (the agent ended before it attached)", impl_->hosts[k]));
        } else {
          waiting = true;
          missing.push_back(
              fmt::format("{} (not attached within {} s)", impl_->hosts[k], kAttachS));
        }
      }
    }
    if (missing.empty()) break;
    if (!waiting || std::chrono::steady_clock::now() > until) {
      raise<Error>(
          "agent: {} of {} host(s) have no agent attached to the control plane {}: {} (its "
          "output is in helpers.log; every host needs this build at the same path and must reach "
          "the control-plane address)",
          missing.size(), impl_->hosts.size(), control_addr, fmt::join(missing, "; "));
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  impl_->hist.harness("agents_ready", {{"hosts", impl_->hosts}, {"ms", ms}});
  impl_->watch = std::thread([this] { impl_->watch_loop(); });
}

void AgentHub::stop() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->watch_cv.notify_all();
  if (impl_->watch.joinable()) impl_->watch.join();
  pb::AgentCommand bye;
  bye.set_action("stop");
  for (auto& c : impl_->conns) {
    std::lock_guard wlock(c->wmu);
    if (c->stream) c->stream->Write(bye);
  }
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait_for(lock, std::chrono::seconds(kStopS), [&] {
    for (auto& c : impl_->conns) {
      if (c->attached && !c->gone) return false;
    }
    return true;
  });
}

std::string AgentHub::lost() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lost;
}

bool AgentHub::up(int node) const {
  if (node < 0 || static_cast<size_t>(node) >= impl_->conns.size()) return false;
  std::lock_guard lock(impl_->mu);
  const auto& c = *impl_->conns[static_cast<size_t>(node)];
  return c.attached && !c.gone && !impl_->stopping;
}

void AgentHub::relay_to(std::function<void(const faultline::v1::EventBatch&)> ingest) {
  impl_->ingest = std::move(ingest);
}

std::string AgentHub::relay_addr(int node) const {
  if (!kAgentRelay.get() || node < 0 || static_cast<size_t>(node) >= impl_->conns.size()) return "";
  std::lock_guard lock(impl_->mu);
  return impl_->conns[static_cast<size_t>(node)]->relay_addr;
}

int AgentHub::command_ranks(int rank, const faultline::v1::WorkerCommand& worker) {
  const int nodes = static_cast<int>(impl_->conns.size());
  int n = 0;
  for (int k = 0; k < nodes; ++k) {
    if (rank >= 0 && node_of_rank(impl_->s.topo.ranks, nodes, rank) != k) continue;
    if (!up(k)) continue;
    pb::AgentCommand cmd;
    cmd.set_action("worker");
    cmd.set_rank(rank);
    *cmd.mutable_worker() = worker;
    try {
      n += impl_->call(k, cmd).status;
    } catch (const Error&) {
      // lost meanwhile: that host's ranks did not get it (the caller is told how many did)
    }
  }
  return n;
}

std::string AgentHub::run(int node, const std::vector<std::string>& argv) {
  pb::AgentCommand cmd;
  cmd.set_action("run");
  for (const auto& a : argv) cmd.add_argv(a);
  const auto r = impl_->call(node, cmd);
  if (!r.ok) {
    raise<Error>("`{}` failed on host {} (agent; {}): {}", fmt::join(argv, " "),
                 impl_->hosts.at(static_cast<size_t>(node)),
                 r.status == 0 ? std::string("refused") : fmt::format("exit {}", r.status),
                 r.output);
  }
  return r.output;
}

bool AgentHub::signal(int node, int rank, pid_t pid, int sig, std::string& why) {
  pb::AgentCommand cmd;
  cmd.set_action("signal");
  cmd.set_pid(pid);
  cmd.set_signal(sig);
  cmd.set_rank(rank);
  try {
    const auto r = impl_->call(node, cmd);
    why = r.output;
    return r.ok;
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

int AgentHub::count() const {
  return static_cast<int>(impl_->hosts.size());
}

std::string AgentHub::name(int node) const {
  return impl_->hosts.at(static_cast<size_t>(node));
}

void AgentHub::on_loss(int node, const std::vector<std::string>& argv) {
  pb::AgentCommand cmd;
  cmd.set_action("on_loss");
  for (const auto& a : argv) cmd.add_argv(a);
  const auto r = impl_->call(node, cmd);
  if (!r.ok)
    raise<Error>("agent on host {}: {}", impl_->hosts.at(static_cast<size_t>(node)), r.output);
}

nlohmann::json AgentHub::apply(int node, const google::protobuf::Any& request) {
  pb::AgentCommand cmd;
  cmd.set_action("fault");
  *cmd.mutable_request() = request;
  const auto r = impl_->call(node, cmd);
  const std::string& host = impl_->hosts.at(static_cast<size_t>(node));
  const std::string what = faults::request_name(request.type_url());
  if (!r.ok) raise<Error>("{} on host {} (agent): {}", what, host, r.output);
  auto report = try_parse_json_bounded(r.output);  // from another host: depth and size limited
  if (!report) raise<Error>("{} on host {}: the agent's report is not JSON", what, host);
  return *report;
}

}  // namespace fl::harness
