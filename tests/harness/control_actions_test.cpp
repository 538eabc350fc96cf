// The control-action table on a live run, under both launchers: an unknown action is refused
// listing the table; restart_rank refuses a running rank, starts a killed one again as a process
// of the local launcher, and is refused by mpirun (whose ranks are not the harness's processes);
// dump_flight_recorder has every rank of a running job write its PyTorch-schema dumps now.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/run/runner.hpp"
#include "tests/comm/fr_schema.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kExamples = FAULTLINE_SOURCE_DIR "/scenarios/clean/";

std::vector<nlohmann::json> history(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/history.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));  // a torn last line while it is written
  }
  return out;
}

// Waits up to 60 s for an event of `kind` (from `source`, for `rank`) in the run's history.
bool wait_for(const std::string& dir, const std::string& source, const std::string& kind,
              int rank) {
  for (int i = 0; i < 2400; ++i) {
    for (const auto& e : history(dir)) {
      if (e["source"] == source && e["kind"] == kind && e["rank"] == rank) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

struct Reply {
  bool called = false, ok = false;
  std::string message;
};

Reply control(const std::string& addr, const std::string& dir, const std::string& action,
              int rank) {
  auto stub = faultline::v1::Controller::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  faultline::v1::ControlRequest req;
  req.set_action(action);
  req.set_rank(rank);
  req.set_signal(9);
  req.set_requester("control-test");
  std::string secret;
  std::ifstream(dir + "/control.secret") >> secret;
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, secret);
  faultline::v1::ControlReply rep;
  Reply r;
  r.called = stub->Control(&ctx, req, &rep).ok();
  r.ok = rep.ok();
  r.message = rep.message();
  return r;
}

struct Seen {
  Reply unknown, running, kill, restart;
  bool rank_exit = false;
  std::string dir;
};

Seen drive(const std::string& launcher, const std::vector<std::string>& more = {}) {
  const auto results = test::fresh_test_dir(
      "harness", ::testing::UnitTest::GetInstance()->current_test_info()->name() + launcher);
  fs::create_directories(results);
  std::vector<std::string> sets = {"workload.steps=400", "topology.launcher=" + launcher,
                                   "timeouts.comm_ms=20000"};
  sets.insert(sets.end(), more.begin(), more.end());
  auto s = load_scenario(kExamples + "clean-dp2-tp2.yaml", {false, sets});
  RunOptions o;
  o.results_dir = results;
  o.print_summary = false;
  Seen seen;
  std::thread client;
  o.on_ready = [&](const std::string& addr, const std::string& dir) {
    seen.dir = dir;
    client = std::thread([&, addr, dir] {
      if (!wait_for(dir, "rank", "step", 1)) return;
      seen.unknown = control(addr, dir, "restart_everything", 1);
      seen.running = control(addr, dir, "restart_rank", 1);
      if (launcher == "local") {
        seen.kill = control(addr, dir, "kill_rank", 1);
        seen.rank_exit = wait_for(dir, "harness", "rank_exit", 1);
        seen.restart = control(addr, dir, "restart_rank", 1);
      }
      control(addr, dir, "abort", -1);
    });
  };
  run_scenario(s, o);
  client.join();
  return seen;
}

// restart_rank starts one rank again: its world's ranks must be MPI singletons, which since stop
// 72 the local launcher starts only when told (FAULTLINE_MPI_START=singleton) or when the run's
// recovery tool is a program of its own.
TEST(ControlActions, UnknownActionAndRestartRankUnderTheLocalLauncher) {
  kMpiStart.set("singleton");
  struct Reset {
    ~Reset() { kMpiStart.reset(); }
  } reset;
  const Seen seen = drive("local");
  ASSERT_TRUE(seen.unknown.called);
  EXPECT_FALSE(seen.unknown.ok);
  EXPECT_EQ(seen.unknown.message,
            "unknown action 'restart_everything' (allowed: kill_rank, restart_rank, restart_job, "
            "abort, list_faults, arm_faults, clear_faults, dump_flight_recorder)");
  EXPECT_FALSE(seen.running.ok);
  EXPECT_EQ(seen.running.message, "rank 1 is running (kill it first)");
  EXPECT_TRUE(seen.kill.ok) << seen.kill.message;
  ASSERT_TRUE(seen.rank_exit);
  EXPECT_TRUE(seen.restart.ok) << seen.restart.message;
  EXPECT_NE(seen.restart.message.find("rank 1 relaunched (pid "), std::string::npos)
      << seen.restart.message;
  // The relaunch is a process of its own, recorded as a launch of rank 1 marked as a restart.
  int launches = 0;
  std::set<int> pids;
  for (const auto& e : history(seen.dir)) {
    if (e["kind"] != "launch" || e["rank"] != 1) continue;
    ++launches;
    pids.insert(e["data"]["pid"].get<int>());
    if (launches == 2) {
      EXPECT_TRUE(e["data"].value("restart", false));
    }
  }
  EXPECT_EQ(launches, 2);
  EXPECT_EQ(pids.size(), 2u);
}

TEST(ControlActions, RestartRankIsRefusedUnderMpirun) {
  const Seen seen = drive("mpirun");
  ASSERT_TRUE(seen.running.called);
  EXPECT_FALSE(seen.running.ok);
  EXPECT_EQ(seen.running.message,
            "restart_rank needs the local or command launcher and a rank 0-3");
}

// The local launcher starts an MPI world whole (the harness as PMIx server; above 8 ranks only
// before stop 72): a rank started again on its own could not join it, so restart_rank says so
// instead of starting one.
TEST(ControlActions, RestartRankIsRefusedInAWorldStartedWholeThroughThePmixServer) {
  const Seen seen = drive("local");
  EXPECT_TRUE(seen.kill.ok) << seen.kill.message;
  ASSERT_TRUE(seen.rank_exit);
  ASSERT_TRUE(seen.restart.called);
  EXPECT_FALSE(seen.restart.ok);
  EXPECT_EQ(
      seen.restart.message,
      "rank 1 started with its whole MPI world at once (mpi_start pmix: 4 ranks, started whole by "
      "the harness); a "
      "rank started again on its own cannot join it (restart_job starts them all; a run "
      "whose recovery tool is a program of its own, or one under FAULTLINE_MPI_START=singleton, "
      "starts MPI singletons)");
}

// A tool asks a healthy running job for its flight-recorder dumps: every rank writes them in
// PyTorch's schema while the job goes on, the reply names them, the history records the request;
// a rank out of range is refused naming what is allowed.
TEST(ControlActions, DumpFlightRecorderHasEveryRankDumpWhileTheJobRuns) {
  const auto results = test::fresh_test_dir("harness", "DumpFlightRecorder");
  fs::create_directories(results);
  auto s = load_scenario(kExamples + "clean-dp2-tp2.yaml",
                         {false, {"workload.steps=400", "timeouts.comm_ms=20000"}});
  RunOptions o;
  o.results_dir = results;
  o.print_summary = false;
  Reply bad, one, all;
  std::string dir;
  std::thread client;
  o.on_ready = [&](const std::string& addr, const std::string& d) {
    dir = d;
    client = std::thread([&, addr, d] {
      if (!wait_for(d, "rank", "step", 1)) return;
      bad = control(addr, d, "dump_flight_recorder", 4);
      one = control(addr, d, "dump_flight_recorder", 2);
      all = control(addr, d, "dump_flight_recorder", -1);
      control(addr, d, "abort", -1);
    });
  };
  run_scenario(s, o);
  client.join();
  ASSERT_TRUE(bad.called);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.message, "rank 4 does not exist (allowed: -1 for every rank, or 0-3)");
  EXPECT_TRUE(one.ok) << one.message;
  EXPECT_EQ(one.message.rfind("dumped: [2]; ", 0), 0u) << one.message;
  EXPECT_TRUE(all.ok) << all.message;
  EXPECT_EQ(all.message.rfind("dumped: [", 0), 0u) << all.message;
  std::vector<nlohmann::json> asked;
  for (const auto& e : history(dir)) {
    if (e["kind"] == "flight_recorder_dump") asked.push_back(e["data"]);
  }
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0]["reason"], "control by control-test");
  EXPECT_EQ(asked[0]["signalled"], nlohmann::json::array({2}));
  EXPECT_EQ(asked[1]["signalled"], nlohmann::json::array({0, 1, 2, 3}));
  std::vector<int> dumped = asked[1]["dumped"].get<std::vector<int>>();
  std::sort(dumped.begin(), dumped.end());
  EXPECT_EQ(dumped, (std::vector<int>{0, 1, 2, 3})) << asked[1].dump();
  for (int r = 0; r < 4; ++r) {
    const std::string rdir = dir + "/ranks/rank" + std::to_string(r);
    EXPECT_TRUE(fs::exists(rdir + "/nccl_trace_rank_" + std::to_string(r))) << r;
    std::ifstream in(rdir + "/fr_trace_rank_" + std::to_string(r) + ".json");
    ASSERT_TRUE(in.good()) << r;
    const auto t = nlohmann::json::parse(in);
    test::expect_pytorch_fr_schema(t, "rank " + std::to_string(r));
    // A healthy job's dump: collectives recorded, taken while it ran.
    EXPECT_FALSE(t["entries"].empty()) << r;
  }
}

}  // namespace
}  // namespace fl::harness
