// The per-host agent (`faultline agent`, harness/agent/) against a real control plane, without
// root: a "host" reached by an rsh agent that runs the command here. It attaches with the run's
// secret and registers; it runs only the network tools, signals only a process that is the asked
// rank of this run; losing it is an agent_lost event and the callback, never a hang; stop ends it
// with status 0; losing the harness makes it run its clean-ups and exit 3; a caller without the
// secret is refused.
// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <google/protobuf/any.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/agent/hub.hpp"
#include "harness/control/controller.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "tests/support/process.hpp"

extern "C" char** environ;

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::fresh_test_dir("agent",
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    secret = make_control_secret();
    write_secret_file(dir + "/" + kControlSecretFile, secret);
    // The rsh agent of a host that is this machine: drop the host, exec the words as given (the
    // harness sends only plain words, checked in agent_command, so no shell is needed here).
    const std::string rsh = dir + "/local-rsh";
    std::ofstream(rsh) << "#!/bin/sh\nshift\nexec \"$@\"\n";
    fs::permissions(rsh, fs::perms::owner_all);
    s.topo.hosts = {"hosta"};
    s.topo.host_addrs = {""};
    s.topo.rsh_agent = rsh;
    hist = std::make_unique<History>(dir + "/history.jsonl");
    sup = std::make_unique<Supervisor>(
        io,
        [this](int, const std::string& name, const std::string&, const std::string& line) {
          lines.push_back(name + ": " + line);
        },
        [this](const ExitInfo& x) { exits[x.pid] = x; });
    ctl = std::make_unique<Controller>(
        *hist, [](const ControlAction&) { return ControlResult{}; }, secret);
    hub = std::make_unique<AgentHub>(s, dir, *hist, secret);
    ctl->add_service(hub->service());
    addr = ctl->start("unix:" + dir + "/c.sock");
    hub->start(
        *sup, FAULTLINE_CLI, addr,
        [this] {
          io.poll();
          return true;
        },
        [this](const std::string& why) { lost = why; });
  }
  void TearDown() override {
    hub->stop();
    ctl->shutdown();
    sup->teardown(std::chrono::milliseconds(2000));
  }

  std::vector<nlohmann::json> events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : hist->events()) {
      if (e.kind == kind) out.push_back(nlohmann::json::parse(e.data_json));
    }
    return out;
  }
  // Pumps the supervisor until `done` or 20 s.
  template <class F>
  bool pump_until(F done) {
    for (int i = 0; i < 400 && !done(); ++i) {
      io.restart();
      io.run_for(std::chrono::milliseconds(50));
    }
    return done();
  }
  pid_t spawn_sleep(bool of_run) {
    ProcessSpec p;
    p.name = of_run ? "rank-like" : "stranger";
    p.argv = {"sleep", "30"};
    p.cwd = dir;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind(std::string(kControlSecretEnv) + "=", 0) != 0) p.env.push_back(*e);
    }
    if (of_run) {
      p.env.push_back(std::string(kControlSecretEnv) + "=" + secret);
      p.env.push_back("RANK=0");
    }
    return sup->spawn(p);
  }

  std::string dir, secret, addr, lost;
  Scenario s;
  boost::asio::io_context io;
  std::unique_ptr<History> hist;
  std::unique_ptr<Supervisor> sup;
  std::unique_ptr<Controller> ctl;
  std::unique_ptr<AgentHub> hub;
  std::vector<std::string> lines;
  std::map<pid_t, ExitInfo> exits;
};

TEST_F(AgentTest, RegistersAndRunsOnlyTheNetworkTools) {
  ASSERT_TRUE(hub->up(0));
  const auto up = events("agent_up");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0]["host"], "hosta");
  EXPECT_EQ(up[0]["node"], 0);
  EXPECT_GT(up[0]["pid"].get<int>(), 1);
  EXPECT_NE(std::find(up[0]["can"].begin(), up[0]["can"].end(), "signal"), up[0]["can"].end());
  ASSERT_EQ(events("agents_ready").size(), 1u);
  // A program outside iptables/tc/ip is refused, whatever the harness asks.
  try {
    hub->run(0, {"sh", "-c", "touch " + dir + "/pwned"});
    FAIL() << "the agent ran sh";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the agent runs only iptables, tc, ip"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/pwned"));
  // An allowed tool runs (as exec, with its output back); a failing one is an Error with it.
  if (std::find(up[0]["can"].begin(), up[0]["can"].end(), "ip") != up[0]["can"].end()) {
    EXPECT_NE(hub->run(0, {"ip", "-o", "addr", "show", "to", "127.0.0.1"}).find("127.0.0.1"),
              std::string::npos);
    EXPECT_THROW(hub->run(0, {"ip", "no-such-object"}), Error);
  }
}

TEST_F(AgentTest, SignalsOnlyTheRankOfThisRun) {
  const pid_t stranger = spawn_sleep(false);
  const pid_t rank0 = spawn_sleep(true);
  std::string why;
  EXPECT_FALSE(hub->signal(0, 0, stranger, SIGKILL, why));
  EXPECT_NE(why.find("is not rank 0 of this run"), std::string::npos) << why;
  EXPECT_FALSE(hub->signal(0, 1, rank0, SIGKILL, why)) << "RANK=0 is not rank 1";
  EXPECT_TRUE(hub->signal(0, 0, rank0, SIGKILL, why)) << why;
  ASSERT_TRUE(pump_until([&] { return exits.count(rank0) > 0; }));
  EXPECT_TRUE(exits[rank0].signaled);
  EXPECT_EQ(exits[rank0].code, SIGKILL);
  EXPECT_EQ(exits.count(stranger), 0u) << "the stranger was signalled";
  EXPECT_TRUE(sup->is_running(stranger));
}

// The signal fault's request (SignalRank): on a host its agent signals only a process that is the
// rank of this run; on this machine (host 0 without agents, in process) the run's supervisor
// signals only its children and their descendants. Each answers whether it was delivered, and why
// not.
TEST_F(AgentTest, ASignalRequestReachesOnlyTheRunsRankOnThisMachineAndThroughAnAgent) {
  Scenario local;  // no hosts, no agents: node 0 is this machine
  faults::Sandbox remote_box(s, dir, *hist, *sup), local_box(local, dir, *hist, *sup);
  remote_box.set_agents(hub.get());
  std::vector<std::string> injected;
  faults::Host remote{s, dir, *hist, *sup, remote_box, 0, "", injected};
  faults::Host here{local, dir, *hist, *sup, local_box, 0, "", injected};
  const pid_t stranger = spawn_sleep(false);
  const pid_t rank0 = spawn_sleep(true);
  auto send = [](faults::Host& h, int rank, pid_t pid, int sig) {
    pb::SignalRank r;
    r.set_rank(rank);
    r.set_pid(pid);
    r.set_signal(sig);
    return faults::on_node(h, 0, r, "signal");
  };
  auto no = send(remote, 0, stranger, SIGKILL);
  EXPECT_EQ(no["delivered"], false);
  EXPECT_EQ(no["host"], "hosta");
  EXPECT_NE(no["why"].get<std::string>().find("is not rank 0 of this run"), std::string::npos)
      << no;
  no = send(here, 0, ::getppid(), 0);  // not one of the run's processes
  EXPECT_EQ(no["delivered"], false);
  EXPECT_EQ(no["why"], fmt::format("process {} is not one of this run's on local (or it is gone); "
                                   "not signalled",
                                   ::getppid()));
  EXPECT_EQ(send(here, 0, 1, 0)["why"], "pid 1 is not a rank's");
  EXPECT_EQ(send(remote, 0, rank0, SIGKILL)["delivered"], true);
  EXPECT_EQ(send(here, 1, stranger, SIGKILL)["delivered"], true) << "a child of the run's";
  ASSERT_TRUE(pump_until([&] { return exits.count(rank0) > 0 && exits.count(stranger) > 0; }));
  EXPECT_EQ(exits[rank0].code, SIGKILL);
  EXPECT_EQ(exits[stranger].code, SIGKILL);
}

TEST_F(AgentTest, ALostAgentIsAnEventAndNeverAHang) {
  const int pid = events("agent_up").at(0)["pid"].get<int>();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 200 && hub->up(0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(hub->up(0));
  EXPECT_NE(lost.find("the agent on host hosta (node 0"), std::string::npos) << lost;
  EXPECT_EQ(hub->lost(), lost);
  const auto gone = events("agent_lost");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0]["host"], "hosta");
  EXPECT_THROW(hub->run(0, {"ip", "link"}), Error);  // at once: nobody to wait for
}

TEST_F(AgentTest, StopEndsTheAgentCleanly) {
  const pid_t child = sup->pids().at(0);
  hub->stop();
  EXPECT_FALSE(hub->up(0));
  ASSERT_TRUE(pump_until([&] { return exits.count(child) > 0; }));
  EXPECT_FALSE(exits[child].signaled);
  EXPECT_EQ(exits[child].code, 0);
  EXPECT_EQ(events("agent_stopped").size(), 1u);
  EXPECT_TRUE(events("agent_lost").empty());
  EXPECT_TRUE(lost.empty());
}

TEST_F(AgentTest, LosingTheHarnessRunsTheCleanupsAndExits) {
  const pid_t child = sup->pids().at(0);
  hub->on_loss(0, {"ip", "-o", "link", "show", "lo"});
  EXPECT_THROW(hub->on_loss(0, {"rm", "-rf", dir}), Error);  // clean-ups are tools too
  ctl->shutdown();  // the harness's end, as the agent sees it
  ASSERT_TRUE(pump_until([&] { return exits.count(child) > 0; }));
  EXPECT_EQ(exits[child].code, 3);
  bool cleaned = false;
  for (const auto& l : lines) cleaned |= l.find("cleaning up (1 command(s))") != std::string::npos;
  EXPECT_TRUE(cleaned) << "no clean-up line in the agent's output";
  EXPECT_TRUE(fs::exists(dir));
}

// Whether this process can bind TCP `port` on loopback now.
bool can_bind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A fault kind's typed request packed as the hub sends it.
google::protobuf::Any pack(const google::protobuf::Message& m) {
  google::protobuf::Any any;
  any.PackFrom(m);
  return any;
}

TEST_F(AgentTest, SquatsAPortUntilReleased) {
  int port = 0;
  for (int p = 23000 + static_cast<int>(::getpid() % 20000); port == 0; ++p) {
    if (can_bind(p)) port = p;
  }
  pb::PortSquat squat;  // port_squat's request, handled in harness/faults/port_squat.cpp
  squat.set_port(port);
  squat.set_hold(true);
  EXPECT_EQ(hub->apply(0, pack(squat))["held"], true);
  EXPECT_FALSE(can_bind(port)) << "the agent does not hold " << port;
  squat.set_hold(false);
  EXPECT_EQ(hub->apply(0, pack(squat))["released"], true);
  EXPECT_TRUE(can_bind(port)) << "the agent still holds " << port;
  squat.set_port(0);
  squat.set_hold(true);
  EXPECT_THROW(hub->apply(0, pack(squat)), Error);
}

TEST_F(AgentTest, AttachWithoutTheSecretIsRefused) {
  auto stub = pb::Agents::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  for (const std::string key : {"", "0123"}) {
    grpc::ClientContext ctx;
    if (!key.empty()) ctx.AddMetadata(kControlSecretHeader, key);
    auto stream = stub->Attach(&ctx);
    pb::AgentReport reg;
    reg.set_host("hosta");
    stream->Write(reg);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED) << key;
  }
  EXPECT_EQ(events("agent_up").size(), 1u);  // only the real one
}

// Host faults through the hub and a real agent (the handlers in harness/faults/KIND.cpp): a path
// outside the run directory comes back as the agent's refusal; a damage is applied, and put back
// by the agent itself when it loses the harness without having been told to restore it.
TEST_F(AgentTest, HostFaultsAreCheckedAndUndoneWhenTheHarnessIsLost) {
  const std::string shard = dir + "/checkpoints/step_2/shard_rank0.bin";
  fs::create_directories(fs::path(shard).parent_path());
  std::ofstream(shard) << std::string(100, 'x');
  pb::DiskFull bad;
  bad.set_path("/etc");
  bad.set_bytes(4096);
  try {
    hub->apply(0, pack(bad));
    FAIL() << "the agent mounted on /etc";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disk_full on host hosta (agent): disk_full: '/etc' is "
                                         "absolute; the agent acts only inside the run directory"),
              std::string::npos)
        << e.what();
  }
  pb::FileDamage cut;
  cut.set_glob("checkpoints/*/shard_rank0.bin");
  cut.set_action("truncate");
  cut.set_bytes(40);
  cut.set_tag("t1");
  const auto r = hub->apply(0, pack(cut));
  ASSERT_EQ(r["files"].size(), 1u) << r.dump();
  EXPECT_EQ(r["files"][0]["new_size"], 60);
  EXPECT_EQ(fs::file_size(shard), 60u);
  const pid_t child = sup->pids().at(0);
  ctl->shutdown();  // the harness's end, as the agent sees it
  ASSERT_TRUE(pump_until([&] { return exits.count(child) > 0; }));
  EXPECT_EQ(exits[child].code, 3);
  EXPECT_EQ(fs::file_size(shard), 100u) << "the agent did not put the shard back";
  bool restored = false;
  for (const auto& l : lines) restored |= l.find("cleanup: file_restore") != std::string::npos;
  EXPECT_TRUE(restored) << "no restore line in the agent's output";
}

// Registrations and reports of every shape from one seed: hosts of the run, one past them
// ("") and unknown names; texts empty, nested far past any stack, JSON, huge or a number.
class AgentReportFuzzer {
 public:
  explicit AgentReportFuzzer(const std::vector<std::string>& hosts) : hosts_(hosts) {}

  pb::AgentReport registration() {
    pb::AgentReport reg;
    const size_t h = pick(hosts_.size() + 3);  // past the end: a host the run does not have
    reg.set_host(h < hosts_.size() ? hosts_[h] : (h == hosts_.size() ? "" : text()));
    reg.set_pid(static_cast<int32_t>(rng_()));
    for (size_t c = pick(4); c > 0; --c) reg.add_can(text().substr(0, 64));
    reg.set_relay_addr(text().substr(0, 200));
    reg.set_heartbeat_ms(static_cast<int32_t>(rng_()));
    return reg;
  }

  // A report; the events it relays are added to `*sent_events`.
  pb::AgentReport report(int64_t* sent_events) {
    pb::AgentReport rep;
    rep.set_id(pick(3) == 0 ? 0 : rng_());
    rep.set_ok(pick(2) == 0);
    rep.set_status(static_cast<int32_t>(rng_()));
    rep.set_output(text());
    rep.set_heartbeat(pick(4) == 0);
    if (pick(3) == 0) {
      for (size_t e = pick(4); e > 0; --e) {
        auto* ev = rep.mutable_relay()->add_events();
        ev->set_rank(static_cast<int32_t>(rng_() % 8));
        ev->set_kind(pick(2) == 0 ? "step" : text().substr(0, 32));
        ev->set_data_json(text());
        ++*sent_events;
      }
    }
    if (pick(5) == 0) rep.set_relayed_batches(rng_());
    return rep;
  }

  size_t pick(uint64_t n) { return static_cast<size_t>(rng_() % n); }

 private:
  std::string text() {
    switch (pick(5)) {
      case 0:
        return "";
      case 1:
        return deep_;
      case 2:
        return R"({"applied": true, "rank": 0})";
      case 3:
        return std::string(pick(70000), 'x');
      default:
        return fmt::format("{}", rng_());
    }
  }

  std::vector<std::string> hosts_;
  std::mt19937_64 rng_{20261128};
  const std::string deep_ = std::string(100000, '[') + std::string(100000, ']');
};

// One attachment with the secret: a fuzzed registration, then up to five fuzzed reports.
grpc::Status attach_fuzzed(pb::Agents::Stub& stub, const std::string& secret,
                           AgentReportFuzzer& fuzz, int64_t* sent_events) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, secret);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub.Attach(&ctx);
  stream->Write(fuzz.registration());
  for (size_t r = fuzz.pick(6); r > 0; --r) {
    if (!stream->Write(fuzz.report(sent_events))) break;
  }
  stream->WritesDone();
  return stream->Finish();
}

// on_node (harness/faults/agent_nodes.hpp): one request, sent to host 0 of a run without agents
// (this machine: the handler runs in this process) and to a host with an agent (the same handler
// in the agent, through the hub), does the same thing and answers the same, but for the host's
// name; a request no kind handles is refused the same way on both, naming its type.
TEST_F(AgentTest, TheInProcessHostZeroAndAnAgentGiveTheSameAnswerToOneRequest) {
  const std::string shard = dir + "/checkpoints/step_2/shard_rank1.bin";
  fs::create_directories(fs::path(shard).parent_path());
  const std::string pristine(256, 'p');
  std::ofstream(shard) << pristine;
  auto read = [&] {
    std::ifstream in(shard, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  Scenario local;  // no hosts, no agents: node 0 is this machine
  faults::Sandbox remote_box(s, dir, *hist, *sup), local_box(local, dir, *hist, *sup);
  remote_box.set_agents(hub.get());
  std::vector<std::string> injected;
  faults::Host remote{s, dir, *hist, *sup, remote_box, 0, "", injected};
  faults::Host here{local, dir, *hist, *sup, local_box, 0, "", injected};
  ASSERT_FALSE(faults::in_process(remote, 0));
  ASSERT_TRUE(faults::in_process(here, 0));

  pb::FileDamage damage;
  damage.set_glob("checkpoints/*/shard_rank1.bin");
  damage.set_action("corrupt");
  damage.set_bytes(32);
  damage.set_seed(11);
  damage.set_tag("same");
  pb::FileRestore restore;
  restore.set_tag("same");
  std::map<std::string, nlohmann::json> damaged, restored;
  std::map<std::string, std::string> bytes;
  for (auto* h : {&remote, &here}) {
    auto d = faults::on_node(*h, 0, damage, "file");
    const std::string host = d["host"];
    bytes[host] = read();
    EXPECT_NE(bytes[host], pristine) << host;
    d.erase("host");
    damaged[host] = d;
    auto r = faults::on_node(*h, 0, restore, "file");
    EXPECT_EQ(read(), pristine) << host;
    r.erase("host");
    restored[host] = r;
  }
  ASSERT_EQ(damaged.size(), 2u) << "hosts: hosta and local";
  EXPECT_EQ(damaged["hosta"], damaged["local"]);
  EXPECT_EQ(damaged["local"]["files"][0]["path"], "checkpoints/step_2/shard_rank1.bin");
  EXPECT_EQ(bytes["hosta"], bytes["local"]) << "the same bytes changed on both";
  EXPECT_EQ(restored["hosta"], restored["local"]);
  EXPECT_EQ(restored["local"]["restored"], nlohmann::json({"checkpoints/step_2/shard_rank1.bin"}));

  pb::Event unknown;
  auto refusal = [&](faults::Host& h) {
    try {
      faults::on_node(h, 0, unknown, "test");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto why = [](const std::string& host) {
    return "no fault kind handles the request 'type.googleapis.com/faultline.v1.Event' on host " +
           host + " (a request is one of the kinds' messages in faultline.proto: ";
  };
  EXPECT_EQ(refusal(here).rfind(why("local"), 0), 0u) << refusal(here);
  EXPECT_EQ(refusal(remote).rfind("event on host hosta (agent): " + why("hosta"), 0), 0u)
      << refusal(remote);
  EXPECT_NE(refusal(here).find("faultline.v1.FileDamage"), std::string::npos) << refusal(here);
}

// Agent messages as input (issue 32): a peer that has the secret — an agent, or whatever took its
// place — sends registrations and reports of every shape: hosts the run does not have, a host
// twice, answers to commands never sent, outputs and relayed event data nested far past any
// stack, empty and huge fields. The hub refuses what it must with the right status, records each
// real attachment and loss once, and never crashes or hangs (seeded, so a failure replays).
TEST(AgentFuzz, ReportsOfEveryShapeFromAPeerWithTheSecretNeverCrashTheHub) {
  const std::string dir = test::fresh_test_dir("agent-fuzz", "reports");
  const std::string secret = make_control_secret();
  Scenario s;
  constexpr int kHosts = 40;
  for (int k = 0; k < kHosts; ++k) s.topo.hosts.push_back(fmt::format("h{}", k));
  s.topo.host_addrs.assign(s.topo.hosts.size(), "");
  History hist(dir + "/history.jsonl");
  Controller ctl(
      hist, [](const ControlAction&) { return ControlResult{}; }, secret);
  AgentHub hub(s, dir, hist, secret);
  std::atomic<int64_t> relayed{0};
  hub.relay_to([&](const pb::EventBatch& b) { relayed += b.events_size(); });
  ctl.add_service(hub.service());
  const std::string addr = ctl.start("unix:" + dir + "/c.sock");
  auto stub = pb::Agents::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  AgentReportFuzzer fuzz(s.topo.hosts);
  int attached = 0, unknown = 0, twice = 0;
  int64_t sent_events = 0;
  for (int i = 0; i < 120; ++i) {
    const grpc::Status st = attach_fuzzed(*stub, secret, fuzz, &sent_events);
    if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      ++unknown;
      EXPECT_NE(st.error_message().find("is not one of the run's hosts"), std::string::npos);
    } else if (st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      ++twice;
    } else {
      ASSERT_TRUE(st.ok()) << i << ": " << st.error_code() << " " << st.error_message();
      ++attached;
    }
  }
  const auto count = [&](const std::string& kind) {
    int n = 0;
    for (const auto& e : hist.events()) n += e.kind == kind ? 1 : 0;
    return n;
  };
  // Each host attaches once and is lost once; every other registration is refused.
  EXPECT_EQ(count("agent_up"), attached);
  EXPECT_EQ(count("agent_lost"), attached);
  EXPECT_GT(attached, 0);
  EXPECT_GT(unknown, 0);
  EXPECT_GT(twice, 0);
  EXPECT_LE(relayed.load(), sent_events);
  ctl.shutdown();
}

// The agent takes the run's secret from the shared run directory only from a file of its own user
// that no one else may read: on NFS with root_squash the harness's 0600 file belongs to uid 65534,
// and every process of that user on every node could read it.
TEST(AgentSecret, ASecretFileThatOthersCouldReadIsNeverUsed) {
  ::unsetenv(kControlSecretEnv);
  const std::string dir = test::fresh_test_dir("agent-secret", "file");
  const std::string file = dir + "/" + kControlSecretFile;
  std::ofstream(file) << make_control_secret() << "\n";
  const std::vector<std::string> argv = {
      FAULTLINE_CLI, "agent", "--control", "unix:" + dir + "/none.sock",
      "--host",      "hosta", "--run-dir", dir};
  ::chmod(file.c_str(), 0644);
  auto r = test::run_process(argv);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("faultline agent hosta: " + file +
                          " has mode 0644: other users could read it; not used (the harness "
                          "writes it 0600)"),
            std::string::npos)
      << r.output;
  if (::geteuid() == 0) {
    ::chmod(file.c_str(), 0600);
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    r = test::run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(file + " belongs to uid 65534, not to this agent's user (uid 0): "
                                   "another user could read or have written it"),
              std::string::npos)
        << r.output;
  }
  fs::remove(file);
  fs::create_symlink("/etc/hostname", file);  // a link is not followed
  r = test::run_process(argv);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("Too many levels of symbolic links"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
