#include "harness/agent/agent.hpp"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/private_dir.hpp"
#include "base/subprocess.hpp"
#include "harness/agent/relay.hpp"
#include "harness/faults/on_nodes.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace fl::harness {

namespace pb = faultline::v1;
namespace fs = std::filesystem;

namespace {

constexpr int kConnectS = 20;
constexpr const char* kToolLimitS = "20";  // no tool the harness asks for runs longer
// The programs the agent runs for the harness (argv[0]); anything else is refused.
const std::vector<std::string> kTools = {"iptables", "tc", "ip"};

void say(const AgentOptions& o, const std::string& line) {
  std::fprintf(stderr, "faultline agent %s: %s\n", o.host.c_str(), line.c_str());
  std::fflush(stderr);
}

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((d + "/" + prog).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// The run's secret: FAULTLINE_CONTROL_SECRET, else RUN_DIR/control.secret on the shared
// filesystem, taken only from a regular file of this user that no one else may read or write. On a
// filesystem that maps root to another user (NFS root_squash) the harness's file belongs to that
// user (often uid 65534), and any of its processes on any node could read the secret; the agent
// then refuses to start rather than serve with it. "" with `why` when there is none to use.
std::string read_secret(const AgentOptions& o, std::string& why) {
  if (const char* s = std::getenv(kControlSecretEnv); s && *s) return s;
  const std::string path = o.run_dir + "/" + kControlSecretFile;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = fmt::format(
        "no secret: neither {} nor {} ({}; the run directory must be on a shared "
        "filesystem)",
        kControlSecretEnv, path, std::strerror(errno));
    return "";
  }
  struct stat st {};
  std::string s;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = fmt::format("{} is not a regular file; not used", path);
  } else if (st.st_uid != ::geteuid()) {
    why = fmt::format(
        "{} belongs to uid {}, not to this agent's user (uid {}): another user could read or have "
        "written it (a filesystem that maps root to another user, e.g. NFS root_squash?); not used",
        path, st.st_uid, ::geteuid());
  } else if ((st.st_mode & 077) != 0) {
    why = fmt::format(
        "{} has mode {:04o}: other users could read it; not used (the harness "
        "writes it 0600)",
        path, st.st_mode & 07777);
  } else {
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    s.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    s = s.substr(0, s.find('\n'));
    if (s.empty()) why = fmt::format("{} is empty", path);
  }
  ::close(fd);
  return s;
}

bool allowed_tool(const google::protobuf::RepeatedPtrField<std::string>& argv, std::string& why) {
  if (argv.empty() || std::find(kTools.begin(), kTools.end(), argv[0]) == kTools.end()) {
    why = fmt::format("the agent runs only {} (asked: '{}')", fmt::join(kTools, ", "),
                      argv.empty() ? std::string() : argv[0]);
    return false;
  }
  return true;
}

std::vector<std::string> bounded_tool(const std::vector<std::string>& tool) {
  std::vector<std::string> argv = {"timeout", "-k", "2", kToolLimitS};
  argv.insert(argv.end(), tool.begin(), tool.end());
  return argv;
}

// What the agent does for the harness, one method per action; answer() is the reply to send.
class AgentActions {
 public:
  AgentActions(const AgentOptions& o, const std::string& secret, TelemetryRelay& relay)
      : o_(o), relay_(relay), node_(o.run_dir, o.host, secret) {}

  pb::AgentReport answer(const pb::AgentCommand& cmd) {
    pb::AgentReport r;
    r.set_id(cmd.id());
    const std::string& a = cmd.action();
    if (a == "run") {
      run(cmd, r);
    } else if (a == "signal") {
      signal(cmd, r);
    } else if (a == "on_loss") {
      std::string why;
      if (allowed_tool(cmd.argv(), why)) {
        on_loss_.emplace_back(cmd.argv().begin(), cmd.argv().end());
        r.set_ok(true);
      } else {
        r.set_output(why);
      }
    } else if (a == "worker") {
      const int n = relay_.deliver(cmd.rank(), cmd.worker());
      r.set_ok(n > 0);
      r.set_status(n);
    } else if (a == "fault" && cmd.has_request()) {
      fault(cmd, r);
    } else if (a == "stop") {
      relay_.stop();  // the ranks are gone: what they sent is forwarded, the counts are final
      r.set_relayed_batches(relay_.batches());
      r.set_relayed_events(relay_.events());
      r.set_ok(true);
      stopped_ = true;
    } else {
      r.set_output(fmt::format(
          "unknown action '{}' (allowed: run, signal, on_loss, fault, stop, worker)", a));
    }
    return r;
  }
  bool stopped() const { return stopped_; }
  // The clean-ups the harness left for a lost connection, in the order given.
  const std::vector<std::vector<std::string>>& on_loss() const { return on_loss_; }
  // What the harness did not heal (it failed, or never got to it) is undone here.
  std::vector<std::string> cleanup() { return node_.cleanup(); }

 private:
  void run(const pb::AgentCommand& cmd, pb::AgentReport& r) {
    std::string why;
    if (!allowed_tool(cmd.argv(), why)) return r.set_output(why);
    try {
      const ToolOutcome out = run_tool_status(bounded_tool({cmd.argv().begin(), cmd.argv().end()}));
      r.set_ok(out.status == 0);
      r.set_status(out.status);
      r.set_output(out.output);
    } catch (const std::exception& e) {
      r.set_status(127);
      r.set_output(e.what());
    }
    say(o_, fmt::format("{} -> {}", fmt::join(cmd.argv(), " "), r.status()));
  }
  // The same check and signal as the signal fault's request (Node::signal_rank); kept for the
  // harness's probes (locate_rank, signal 0).
  void signal(const pb::AgentCommand& cmd, pb::AgentReport& r) {
    std::string why;
    if (node_.signal_rank(cmd.rank(), cmd.pid(), cmd.signal(), why)) {
      r.set_ok(true);
      r.set_output(
          fmt::format("signal {} to pid {} (rank {})", cmd.signal(), cmd.pid(), cmd.rank()));
    } else {
      r.set_output(why);
    }
    say(o_, r.output());
  }
  // A fault kind's typed request, applied by the handler its kind registered (on_nodes.hpp).
  void fault(const pb::AgentCommand& cmd, pb::AgentReport& r) {
    try {
      r.set_output(node_.apply(cmd.request()).dump());
      r.set_ok(true);
    } catch (const std::exception& e) {
      r.set_output(e.what());
    }
    say(o_, fmt::format("fault {} -> {}", cmd.request().ShortDebugString(), r.output()));
  }

  const AgentOptions& o_;
  TelemetryRelay& relay_;
  std::vector<std::vector<std::string>> on_loss_;
  faults::Node node_;  // what the fault kinds' handlers made here (cgroups, mounts, ports, ...)
  bool stopped_ = false;
};

// The run's secret, read only from a private run directory; "" after saying why not.
std::string secret_to_attach(const AgentOptions& o) {
  // The agent reads the secret there, makes its relay socket and file backups there: a directory
  // another user on this host can write would hand them all three.
  try {
    const std::string why = check_private_dir(o.run_dir, "--run-dir", o.allow_shared_results);
    if (!why.empty()) say(o, "warning: accepted with --allow-shared-results: " + why);
  } catch (const std::exception& e) {
    say(o, e.what());
    return "";
  }
  std::string no_secret;
  const std::string secret = read_secret(o, no_secret);
  if (secret.empty()) say(o, no_secret);
  return secret;
}

// The channel to the control plane, connected within kConnectS, or nullptr after saying so.
std::shared_ptr<grpc::Channel> connect(const AgentOptions& o) {
  grpc::ChannelArguments args;
  // A harness whose machine vanished is noticed without traffic of our own.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  auto channel = grpc::CreateCustomChannel(o.control, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(kConnectS))) {
    say(o, fmt::format("cannot reach the control plane {} within {} s", o.control, kConnectS));
    return nullptr;
  }
  return channel;
}

// The first report: who this agent is, what it can do, where its relay listens.
pb::AgentReport registration(const AgentOptions& o, TelemetryRelay& relay) {
  pb::AgentReport reg;
  reg.set_host(o.host);
  reg.set_pid(static_cast<int>(::getpid()));
  reg.add_can("signal");
  for (const char* f : {"memory_limit", "disk_full", "file"}) reg.add_can(f);  // on_nodes.hpp
  for (const auto& t : kTools) {
    if (on_path(t)) reg.add_can(t);
  }
  std::string no_relay;
  reg.set_relay_addr(relay.start(no_relay));
  if (reg.relay_addr().empty()) say(o, "no telemetry relay: " + no_relay);
  reg.set_heartbeat_ms(static_cast<int>(kAgentHeartbeatMs.get()));
  return reg;
}

void run_on_loss(const AgentOptions& o, const std::vector<std::vector<std::string>>& on_loss) {
  say(o, fmt::format("lost the control plane {}; cleaning up ({} command(s))", o.control,
                     on_loss.size()));
  for (const auto& tool : on_loss) {  // in the order given
    try {
      say(o, fmt::format("{} -> {}", fmt::join(tool, " "),
                         run_tool_status(bounded_tool(tool)).status));
    } catch (const std::exception& e) {
      say(o, e.what());
    }
  }
}

}  // namespace

int run_agent(const AgentOptions& o) {
  const std::string secret = secret_to_attach(o);
  if (secret.empty()) return 2;
  const auto channel = connect(o);
  if (!channel) return 2;
  auto stub = pb::Agents::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, secret);
  auto stream = stub->Attach(&ctx);
  // The stream has several writers (answers, the relay's batches, the heartbeat): one at a time,
  // and none once it is closed.
  std::mutex wmu;
  bool open = true;
  const AgentWrite write = [&](const pb::AgentReport& r) {
    std::lock_guard lock(wmu);
    return open && stream->Write(r);
  };
  TelemetryRelay relay(o.run_dir, o.host, secret, write);
  const pb::AgentReport reg = registration(o, relay);
  // Through `write`: the relay listens from here on, and a rank's batch may come in while the
  // registration is still being written (the harness can read it first). Two writes at once on
  // one stream abort the process (gRPC's GRPC_CALL_ERROR_TOO_MANY_OPERATIONS).
  if (!write(reg)) {
    {
      std::lock_guard lock(wmu);
      open = false;
    }
    const auto st = stream->Finish();
    say(o,
        fmt::format("the control plane {} refused the agent: {}", o.control, st.error_message()));
    return 2;
  }
  say(o, fmt::format("attached to {} (pid {}; relay {})", o.control, ::getpid(),
                     reg.relay_addr().empty() ? std::string("none") : reg.relay_addr()));
  Heartbeat heartbeat(write, std::chrono::milliseconds(std::max(reg.heartbeat_ms(), 50)));
  for (const auto& line : faults::Node::sweep_stale()) say(o, "stale: " + line);

  AgentActions actions(o, secret, relay);
  pb::AgentCommand cmd;
  while (!actions.stopped() && stream->Read(&cmd)) {
    if (!write(actions.answer(cmd))) break;
  }
  heartbeat.stop();
  relay.stop();
  {
    std::lock_guard lock(wmu);
    open = false;
  }
  for (const auto& line : actions.cleanup()) say(o, "cleanup: " + line);
  if (actions.stopped()) {
    // Finish waits for the harness to end the call, so the stop's answer (the relay's final
    // counts) is read before this process exits: returning after WritesDone alone let the exit
    // drop it now and then (hosts.relay read the agent's counts as 0).
    stream->WritesDone();
    const grpc::Status st = stream->Finish();
    say(o, st.ok() ? std::string("stopped by the harness")
                   : "stopped by the harness; the call ended with: " + st.error_message());
    return 0;
  }
  ctx.TryCancel();
  run_on_loss(o, actions.on_loss());
  return 3;
}

}  // namespace fl::harness
