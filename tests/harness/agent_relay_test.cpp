// The telemetry relay and the silence of per-host agents (harness/agent/relay.hpp, silence.hpp).
// SilenceJudge is pure logic over a clock the test gives. The relay and the heartbeat run for real:
// two "hosts" that are this machine (an rsh agent that execs the words here), two agents attached
// to a real control plane, a fake rank speaking Controller.Connect to its host's agent. No root.
// The keepalive case waits for the control plane's keepalive (up to 30 s).
// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "harness/agent/hub.hpp"
#include "harness/agent/silence.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "tests/support/children.hpp"
#include "tests/support/process.hpp"

extern "C" char** environ;

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

constexpr int64_t kS = 1'000'000'000;

// ---- SilenceJudge: no time passes, the test moves the clock.

TEST(SilenceJudge, ASilentAgentIsLostOnlyWhileAPeerIsHeardAndAfterTheConfirmation) {
  SilenceJudge j(2);
  j.attach(0, 1000, 0);
  j.attach(1, 1000, 0);
  int64_t t = 0;
  // Agent 1 goes quiet; agent 0 reports every second.
  for (int i = 1; i <= 5; ++i) {
    t = i * kS;
    j.heard(0, t);
    EXPECT_FALSE(j.judge(t)) << "judged after " << i << " s";
  }
  // 5 s of silence and 5 reports of the peer: the condition holds, the confirmation starts.
  t += kS / 2;
  EXPECT_FALSE(j.judge(t));
  t += kS;
  j.heard(0, t);
  EXPECT_FALSE(j.judge(t)) << "judged before the confirmation of two intervals";
  t += kS + kS / 2;
  j.heard(0, t);
  const auto v = j.judge(t);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->node, 1u);
  EXPECT_EQ(v->peer, 0u);
  EXPECT_GE(v->peer_reports, SilenceJudge::kBeats);
  EXPECT_NEAR(v->silent_s, static_cast<double>(t) / kS, 1e-9);
  const std::string why = silence_reason(*v, {"ha", "hb"});
  EXPECT_NE(why.find("heartbeat overdue: nothing heard from host hb for 8.0 s while host ha was "
                     "heard 7 times"),
            std::string::npos)
      << why;
}

TEST(SilenceJudge, EveryAgentQuietTogetherIsNoVerdict) {
  SilenceJudge j(3);
  for (size_t k = 0; k < 3; ++k) j.attach(k, 1000, 0);
  for (int64_t t = 0; t <= 120 * kS; t += kS / 4) EXPECT_FALSE(j.judge(t)) << t;
}

TEST(SilenceJudge, OneHostHasNoPeerToCompareWith) {
  SilenceJudge j(1);
  j.attach(0, 1000, 0);
  EXPECT_FALSE(j.judge(600 * kS));
}

TEST(SilenceJudge, APeerHeardLessThanTheBeatsIsNoEvidence) {
  SilenceJudge j(2);
  j.attach(0, 1000, 0);
  j.attach(1, 1000, 0);
  for (uint64_t i = 1; i < SilenceJudge::kBeats; ++i) j.heard(0, static_cast<int64_t>(i) * kS);
  for (int64_t t = 0; t <= 60 * kS; t += kS / 4) EXPECT_FALSE(j.judge(t)) << t;
}

TEST(SilenceJudge, AHarnessThatStalledReadsEveryoneBeforeTheConfirmation) {
  // Nothing is read for 20 s (the harness stalled), then agent 0's queued reports are read, and
  // agent 1's a moment later: a judge that runs in between starts a confirmation, never a verdict.
  SilenceJudge j(2);
  j.attach(0, 1000, 0);
  j.attach(1, 1000, 0);
  int64_t t = 20 * kS;
  for (int i = 0; i < 20; ++i) j.heard(0, t);
  EXPECT_FALSE(j.judge(t));
  t += kS / 100;
  for (int i = 0; i < 20; ++i) j.heard(1, t);
  for (int k = 0; k < 20; ++k) {
    t += kS / 4;
    if (k % 4 == 0) {
      j.heard(0, t);
      j.heard(1, t);
    }
    EXPECT_FALSE(j.judge(t)) << t;
  }
}

TEST(SilenceJudge, AForgottenAgentIsNeitherJudgedNorAPeer) {
  SilenceJudge j(2);
  j.attach(0, 1000, 0);
  j.attach(1, 1000, 0);
  j.forget(1);
  for (int i = 1; i <= 30; ++i) j.heard(0, i * kS);
  for (int64_t t = 0; t <= 40 * kS; t += kS / 2) EXPECT_FALSE(j.judge(t)) << "a stopped agent";
  SilenceJudge k(2);
  k.attach(0, 1000, 0);
  k.attach(1, 1000, 0);
  k.forget(0);
  for (int64_t t = 0; t <= 40 * kS; t += kS / 2) EXPECT_FALSE(k.judge(t)) << "a stopped peer";
}

// ---- The relay and the heartbeat through real agents.

class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Beats every 200 ms: a silent agent is judged after about 1.4 s of its peer's reports.
    ::setenv("FAULTLINE_AGENT_HEARTBEAT_MS", "200", 1);
    base = test::fresh_test_dir("relay",
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir = base + run_subdir();
    fs::create_directories(dir);
    secret = make_control_secret();
    write_secret_file(dir + "/" + kControlSecretFile, secret);
    const std::string rsh = dir + "/local-rsh";
    std::ofstream(rsh) << "#!/bin/sh\nshift\nexec \"$@\"\n";
    fs::permissions(rsh, fs::perms::owner_all);
    s.topo.hosts = {"hosta", "hostb"};
    s.topo.host_addrs = {"", ""};
    s.topo.rsh_agent = rsh;
    s.topo.ranks = 4;
    hist = std::make_unique<History>(dir + "/history.jsonl");
    hist->harness("run_start", {{"ranks", 4}});
    sup = std::make_unique<Supervisor>(
        io, [](int, const std::string&, const std::string&, const std::string&) {},
        [](const ExitInfo&) {});
    ctl = std::make_unique<Controller>(
        *hist, [](const ControlAction&) { return ControlResult{}; }, secret);
    hub = std::make_unique<AgentHub>(s, dir, *hist, secret);
    ctl->add_service(hub->service());
    hub->relay_to([this](const pb::EventBatch& b) { ctl->ingest(b); });
    ctl->relay_commands(
        [this](int rank, const pb::WorkerCommand& c) { return hub->command_ranks(rank, c); });
    addr = ctl->start("unix:" + base + "/c.sock");
    hub->start(
        *sup, FAULTLINE_CLI, addr,
        [this] {
          io.poll();
          return true;
        },
        [this](const std::string& why) {
          std::lock_guard lock(mu);
          lost = why;
        });
  }
  // The run directory under the test's own (a long one: its agents' sockets cannot live in it).
  virtual std::string run_subdir() const { return ""; }
  void TearDown() override {
    for (auto& [pid, _] : pids_of("agent_up")) ::kill(pid, SIGCONT);
    hub->stop();
    ctl->shutdown();
    sup->teardown(std::chrono::milliseconds(2000));
    ::unsetenv("FAULTLINE_AGENT_HEARTBEAT_MS");
  }

  std::vector<nlohmann::json> events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : hist->events()) {
      if (e.kind == kind) out.push_back(nlohmann::json::parse(e.data_json));
    }
    return out;
  }
  std::map<int, std::string> pids_of(const std::string& kind) const {
    std::map<int, std::string> m;
    for (const auto& d : events(kind)) m[d["pid"].get<int>()] = d["host"].get<std::string>();
    return m;
  }
  std::string lost_now() {
    std::lock_guard lock(mu);
    return lost;
  }

  std::string base, dir, secret, addr, lost;
  std::mutex mu;
  Scenario s;
  boost::asio::io_context io;
  std::unique_ptr<History> hist;
  std::unique_ptr<Supervisor> sup;
  std::unique_ptr<Controller> ctl;
  std::unique_ptr<AgentHub> hub;
};

pb::EventBatch batch_of(int rank, uint64_t first, uint64_t n) {
  pb::EventBatch b;
  for (uint64_t i = first; i < first + n; ++i) {
    auto* e = b.add_events();
    e->set_rank(rank);
    e->set_seq(i);
    e->set_kind("heartbeat");
    e->set_step(-1);
    e->set_data_json("{}");
    e->set_source("rank");
  }
  b.set_dropped_total(first);  // anything the harness can check it kept
  return b;
}

TEST_F(RelayTest, ARanksBatchesComeThroughItsHostsAgentInOrderAndCommandsGoBack) {
  const auto up = events("agent_up");
  ASSERT_EQ(up.size(), 2u);
  for (const auto& u : up) {
    EXPECT_EQ(u["relay"], "unix:" + dir + "/agents/" + u["host"].get<std::string>() + ".sock") << u;
    EXPECT_EQ(u["heartbeat_ms"], 200);
  }
  ASSERT_EQ(hub->relay_addr(1), "unix:" + dir + "/agents/hostb.sock");
  EXPECT_EQ(fs::status(dir + "/agents/hostb.sock").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  // Rank 3 lives on hostb (4 ranks over 2 hosts).
  auto stub = pb::Controller::NewStub(
      grpc::CreateChannel(hub->relay_addr(1), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, secret);
  auto stream = stub->Connect(&ctx);
  ASSERT_TRUE(stream->Write(batch_of(3, 0, 4)));
  ASSERT_TRUE(stream->Write(batch_of(3, 4, 5)));
  ASSERT_TRUE(stream->Write(batch_of(3, 9, 1)));
  // Once the harness has them, a command for rank 3 goes down through hostb's agent.
  // A bounded wait, not a timing assertion: generous because a loaded machine (a full ctest -j2)
  // once left it short at 10 s; the failure says whether the hub had given the agent up.
  for (int i = 0; i < 1200 && ctl->events_ingested() < 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(ctl->events_ingested(), 10u)
      << "lost: '" << lost_now() << "', agent_lost events: " << events("agent_lost").size();
  EXPECT_EQ(ctl->send_command(3, "arm_faults", "site=x", 7), 1);
  EXPECT_EQ(ctl->send_command(0, "arm_faults", "site=x", 7), 0) << "rank 0 never connected";
  pb::WorkerCommand cmd;
  ASSERT_TRUE(stream->Read(&cmd));
  EXPECT_EQ(cmd.action(), "arm_faults");
  EXPECT_EQ(cmd.plan(), "site=x");
  EXPECT_EQ(cmd.seed(), 7u);
  stream->WritesDone();
  while (stream->Read(&cmd)) {
  }
  EXPECT_TRUE(stream->Finish().ok());

  // The history has them as if they had come straight, in the rank's order.
  std::vector<uint64_t> seqs;
  for (const auto& e : hist->events()) {
    if (e.source == "rank") {
      EXPECT_EQ(e.rank, 3);
      EXPECT_FALSE(e.late);
      seqs.push_back(e.seq);
    }
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(ctl->received()[3].size(), 10u);
  EXPECT_EQ(ctl->dropped()[3], 9u);

  // Each host's counts, the harness's and the agent's own, in agent_stopped.
  hub->stop();
  std::map<std::string, nlohmann::json> relayed;
  for (const auto& d : events("agent_stopped")) relayed[d["host"]] = d["relayed"];
  ASSERT_EQ(relayed.size(), 2u);
  EXPECT_EQ(
      relayed["hostb"],
      (nlohmann::json{{"batches", 3}, {"events", 10}, {"agent_batches", 3}, {"agent_events", 10}}));
  EXPECT_EQ(relayed["hosta"]["events"], 0);
  EXPECT_TRUE(events("agent_lost").empty());
}

TEST_F(RelayTest, TheRelayRefusesACallerWithoutTheSecret) {
  auto stub = pb::Controller::NewStub(
      grpc::CreateChannel(hub->relay_addr(0), grpc::InsecureChannelCredentials()));
  for (const std::string key : {"", "0123"}) {
    grpc::ClientContext ctx;
    if (!key.empty()) ctx.AddMetadata(kControlSecretHeader, key);
    auto stream = stub->Connect(&ctx);
    stream->Write(batch_of(0, 0, 1));
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED) << key;
  }
  EXPECT_EQ(ctl->events_ingested(), 0u);
}

TEST_F(RelayTest, AnAgentThatFallsSilentIsLostWhileItsPeerIsHeard) {
  // SIGSTOP: hostb's agent says nothing more, yet its connection stays open (as a host whose
  // link went down); only its silence tells.
  int pid_b = 0;
  for (auto& [pid, host] : pids_of("agent_up")) {
    if (host == "hostb") pid_b = pid;
  }
  ASSERT_GT(pid_b, 1);
  ASSERT_EQ(::kill(pid_b, SIGSTOP), 0);
  for (int i = 0; i < 600 && lost_now().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string why = lost_now();
  EXPECT_NE(why.find("the agent on host hostb (node 1"), std::string::npos) << why;
  EXPECT_NE(why.find("heartbeat overdue: nothing heard from host hostb for"), std::string::npos)
      << why;
  EXPECT_NE(why.find("while host hosta was heard"), std::string::npos) << why;
  EXPECT_FALSE(hub->up(1));
  EXPECT_TRUE(hub->up(0));
  const auto gone = events("agent_lost");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0]["host"], "hostb");
  EXPECT_NE(gone[0]["reason"].get<std::string>().find("heartbeat overdue"), std::string::npos);
  EXPECT_EQ(hub->command_ranks(2, pb::WorkerCommand()), 0) << "no call to a lost agent";
}

TEST_F(RelayTest, AgentsSilentTogetherAreLeftToTheKeepalive) {
  // Both agents stop at once: no peer is heard, so silence proves nothing; the control plane's
  // keepalive (a ping unanswered for kControlKeepaliveTimeoutMs) closes their connections.
  const auto pids = pids_of("agent_up");
  ASSERT_EQ(pids.size(), 2u);
  for (auto& [pid, _] : pids) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const int limit_ms = 3 * (kControlKeepaliveTimeMs + kControlKeepaliveTimeoutMs);
  for (int i = 0; i < limit_ms / 50 && events("agent_lost").size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto gone = events("agent_lost");
  ASSERT_EQ(gone.size(), 2u);
  for (const auto& g : gone) {
    EXPECT_NE(g["reason"].get<std::string>().find("no keepalive answer: nothing heard from it for"),
              std::string::npos)
        << g;
  }
  EXPECT_NE(lost_now().find("no keepalive answer"), std::string::npos) << lost_now();
}

// As another user on the host: connect() to the unix socket at `path` (built before the fork).
// 0 when refused for permission, 3 when it connected, 4 for any other error.
int nobody_connects(const std::string& path) {
  return test::as_nobody([&] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return 3;
    return errno == EACCES ? 0 : 4;
  });
}

TEST_F(RelayTest, AnotherUserOnTheHostCannotConnectToTheRelay) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become uid 65534";
  // Every directory on the way open to others: only the socket's own mode keeps them out.
  for (fs::path p = dir + "/agents"; p != p.root_path(); p = p.parent_path()) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    if ((st.st_mode & S_IXOTH) == 0) ::chmod(p.c_str(), (st.st_mode & 07777) | S_IXOTH);
  }
  const std::string sock = hub->relay_addr(0).substr(5);
  EXPECT_EQ(nobody_connects(sock), 0) << sock;
  EXPECT_EQ(ctl->events_ingested(), 0u);
}

// A run directory too deep for a unix socket path (108 bytes): the relay once fell back to
// loopback TCP, which any user of the host can connect to, and once the agent is gone, listen on
// in its place to collect the secret the host's ranks present.
class LongPathRelayTest : public RelayTest {
 protected:
  std::string run_subdir() const override { return "/" + std::string(100, 'd'); }
};

TEST_F(LongPathRelayTest, ARunPathTooLongForASocketGetsAPrivateDirectoryNotLoopbackTcp) {
  const std::string a = hub->relay_addr(1);
  ASSERT_EQ(a.rfind("unix:/tmp/faultline-relay-", 0), 0u) << a;
  ASSERT_EQ(a.substr(a.size() - 11), "/relay.sock") << a;
  const std::string sock = a.substr(5);
  const std::string private_dir = fs::path(sock).parent_path().string();
  EXPECT_EQ(fs::status(private_dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(sock).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  if (::geteuid() == 0) {
    EXPECT_EQ(nobody_connects(sock), 0) << sock;
  }
  // The host's ranks still stream through it.
  auto stub = pb::Controller::NewStub(grpc::CreateChannel(a, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, secret);
  auto stream = stub->Connect(&ctx);
  ASSERT_TRUE(stream->Write(batch_of(3, 0, 2)));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  for (int i = 0; i < 400 && ctl->events_ingested() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(ctl->events_ingested(), 2u);
  // Stopped, the agent takes its directory with it.
  hub->stop();
  EXPECT_FALSE(fs::exists(private_dir)) << private_dir;
}

}  // namespace
}  // namespace fl::harness
