// Launch tests: real workers under mpirun, with a rank that drops a collective, ranks whose
// launch environment disagrees, a squatted store port. Each asserts the message the symptom
// produces, the exit status and (for timeouts) the flight-recorder dump.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/comm/fr_schema.hpp"
#include "tests/support/process.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

class WorkerLaunch : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_test_dir("launch", testing::UnitTest::GetInstance()->current_test_info()->name());
    env_ = {{"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", std::to_string(free_port())},
            {"FAULTLINE_FLIGHT_RECORDER_DIR", dir_.string()},
            {"FAULTLINE_RDZV_TIMEOUT_MS", "15000"},
            {"FAULTLINE_COMM_SPIN_US", "2000"}};
  }
  void TearDown() override { fs::remove_all(dir_); }

  ProcessResult launch(int ranks, std::vector<std::string> args, std::string plan = "") {
    if (!plan.empty()) env_["FAULTLINE_FAULTS"] = plan;
    auto argv = mpirun_prefix(ranks);
    argv.push_back(FAULTLINE_COMM_FAULT_WORKER);
    for (auto& a : args) argv.push_back(a);
    return run_process(argv, env_);
  }

  // mpirun MPMD: `ranks - 1` ordinary workers, then one whose environment has `override`.
  ProcessResult launch_with_last_rank_env(int ranks, const std::string& override) {
    auto argv = mpirun_prefix(ranks - 1);
    for (auto& a : std::vector<std::string>{FAULTLINE_COMM_FAULT_WORKER, ":", "-np", "1", "-x",
                                            override, FAULTLINE_COMM_FAULT_WORKER}) {
      argv.push_back(a);
    }
    return run_process(argv, env_);
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(WorkerLaunch, CleanRunCompletes) {
  auto r = launch(4, {"--ops", "6"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] 6 ops ok"), std::string::npos)
        << r.output;
  }
}

TEST_F(WorkerLaunch, RankThatSkipsAnAllReduceMakesOthersTimeOut) {
  // Rank 2 skips the last all_reduce (seq 3): the others wait in it until their deadline.
  // Rank 2 goes on to the final barrier; with the same timeout there it would give up at the
  // same moment as the others, and whichever rank aborts first makes mpirun kill the rest
  // before they print. Its barrier waits longer, so the first to give up is a rank in seq 3.
  const int timeout_ms = 2000;
  auto r = launch(
      4, {"--ops", "4", "--timeout-ms", std::to_string(timeout_ms), "--finish-timeout-ms", "15000"},
      "comm.all_reduce[rank=2,seq=3]=drop");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 2] all_reduce 3 was dropped by the fault plan"), std::string::npos)
      << r.output;
  // At least one of the ranks that did call seq 3 reports the timeout of exactly that op.
  std::regex re(
      R"(\[rank ([013])\] comm timeout: all_reduce on group 'world' \(seq 3, count 1000, )"
      R"(dtype fp32, reduce sum\) did not complete after (\d+) ms \(timeout 2000 ms\); )"
      R"(flight recorder dumped to (\S+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, re)) << r.output;
  // Not before the deadline; how much later depends on the machine's load, so no upper bound.
  EXPECT_GE(std::stoi(m[2]), timeout_ms) << r.output;
  EXPECT_EQ(r.exit_code, exit_code::kCommTimeout) << r.output;

  // The dump names the timed-out op and shows the earlier ones completed.
  std::ifstream in(m[3].str());
  ASSERT_TRUE(in.good()) << "no flight recorder dump at " << m[3];
  auto dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["rank"], std::stoi(m[1]));
  auto& entries = dump["entries"];
  ASSERT_EQ(entries.size(), 4u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(entries[s]["seq"], s);
    EXPECT_EQ(entries[s]["state"], "completed");
  }
  EXPECT_EQ(entries[3]["seq"], 3);
  EXPECT_EQ(entries[3]["op"], "all_reduce");
  EXPECT_EQ(entries[3]["state"], "timed-out");
  EXPECT_EQ(entries[3]["count"], 1000);
}

TEST_F(WorkerLaunch, TimeoutDumpsInPytorchsSchemaMatchAcrossRanks) {
  // A split into {0,2} and {1,3}, an all_reduce on each half, then world all_reduces of which
  // rank 2 drops the last (world seq 3): the ranks left waiting dump on their timeout (rank 2's
  // final barrier waits longer, so it is not the first to give up and abort the job).
  auto r = launch(
      4, {"--op", "split", "--ops", "4", "--timeout-ms", "2000", "--finish-timeout-ms", "15000"},
      "comm.all_reduce[rank=2,seq=3]=drop");
  EXPECT_EQ(r.exit_code, exit_code::kCommTimeout) << r.output;
  std::map<int, nlohmann::json> dumps;
  const std::regex re(R"(\[rank ([013])\] comm timeout: all_reduce on group 'world' \(seq 3,)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    const int rank = std::stoi((*it)[1]);
    const auto json_path = dir_ / fmt::format("fr_trace_rank_{}.json", rank);
    std::ifstream in(json_path);
    ASSERT_TRUE(in.good()) << "no PyTorch-schema dump at " << json_path;
    dumps[rank] = nlohmann::json::parse(in);
    expect_pytorch_fr_schema(dumps[rank], json_path.string());
    const std::string rt = python_pickle_roundtrip(
        (dir_ / fmt::format("nccl_trace_rank_{}", rank)).string(), json_path.string());
    if (rt != "skip") {
      EXPECT_EQ(rt, "") << "rank " << rank;
    }
  }
  ASSERT_FALSE(dumps.empty()) << r.output;
  for (const auto& [rank, t] : dumps) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // The world is pg 0 on every rank, the half pg 1 with this rank's half as its members.
    EXPECT_EQ(t["pg_config"]["0"]["ranks"], "[0, 1, 2, 3]");
    EXPECT_EQ(t["pg_config"]["0"]["desc"], "default_pg");
    EXPECT_EQ(t["pg_config"]["1"]["desc"], "half");
    EXPECT_EQ(t["pg_config"]["1"]["ranks"], rank % 2 ? "[1, 3]" : "[0, 2]");
    const auto& e = t["entries"];
    ASSERT_EQ(e.size(), 5u);  // split, half all_reduce, world all_reduce x 3
    EXPECT_EQ(e[0]["profiling_name"], "nccl:split");
    EXPECT_EQ(e[1]["pg_id"], 1);
    EXPECT_EQ(e[1]["collective_seq_id"], 1);
    EXPECT_EQ(e[1]["state"], "completed");
    // The op rank 2 never called: same pg and seq on every waiting rank, started, not completed.
    const auto& last = e[4];
    EXPECT_EQ(last["pg_id"], 0);
    EXPECT_EQ(last["process_group"], nlohmann::json::array({"0", "default_pg"}));
    EXPECT_EQ(last["collective_seq_id"], 4);
    EXPECT_EQ(last["profiling_name"], "nccl:all_reduce");
    EXPECT_EQ(last["state"], "started");
    EXPECT_TRUE(last["retired"].get<bool>());
    EXPECT_EQ(last["timeout_ms"], 2000);
    EXPECT_EQ(t["pg_status"]["0"]["last_enqueued_collective"], 4);
    EXPECT_EQ(t["pg_status"]["0"]["last_completed_collective"], 3);
  }
}

TEST_F(WorkerLaunch, SkippedOpInTheMiddleShiftsEveryLaterOpUntilTheLastHangs) {
  // As with NCCL, collectives match by call order, not by intent: after rank 2 skips seq 3, its
  // seq 4 pairs with the others' seq 3 and so on, results are silently wrong, and only the
  // others' last op (seq 7) finds no partner and times out.
  // Rank 2 finishes its 8 ops and waits at the final barrier longer than the others wait in
  // their last all_reduce, so the first to give up is one of the ranks left hanging.
  auto r = launch(4, {"--ops", "8", "--timeout-ms", "2000", "--finish-timeout-ms", "15000"},
                  "comm.all_reduce[rank=2,seq=3]=drop");
  EXPECT_EQ(r.exit_code, exit_code::kCommTimeout) << r.output;
  EXPECT_NE(r.output.find("[rank 2] 8 ops ok"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(\[rank [013]\] comm timeout: all_reduce on group 'world' \(seq 7,)")))
      << r.output;
}

TEST_F(WorkerLaunch, VerifyModeTurnsTheSkippedOpIntoANamedMismatch) {
  auto r = launch(4, {"--ops", "8", "--timeout-ms", "10000", "--verify"},
                  "comm.all_reduce[rank=2,seq=3]=drop");
  EXPECT_EQ(r.exit_code, exit_code::kCommMismatch) << r.output;
  EXPECT_NE(r.output.find("collective mismatch on group 'world': rank 2 called all_reduce(count "
                          "1000, dtype fp32, reduce sum) at seq 4; ranks 0-1,3 called "
                          "all_reduce(count 1000, dtype fp32, reduce sum) at seq 3"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("comm timeout"), std::string::npos) << r.output;
}

TEST_F(WorkerLaunch, ResizedAndRetypedOpsAreCalledWithTheAlteredShape) {
  auto r = launch(4, {"--ops", "6", "--timeout-ms", "10000", "--verify"},
                  "comm.all_reduce[rank=1,seq=2]=resize(-10)");
  EXPECT_EQ(r.exit_code, exit_code::kCommMismatch) << r.output;
  EXPECT_NE(r.output.find("rank 1 called all_reduce(count 990, dtype fp32, reduce sum) at seq 2; "
                          "ranks 0,2-3 called all_reduce(count 1000, dtype fp32, reduce sum) at "
                          "seq 2"),
            std::string::npos)
      << r.output;
  env_["MASTER_PORT"] = std::to_string(free_port());
  r = launch(4, {"--ops", "6", "--timeout-ms", "10000", "--verify"},
             "comm.all_reduce[rank=3,seq=1]=retype(fp16)");
  EXPECT_EQ(r.exit_code, exit_code::kCommMismatch) << r.output;
  EXPECT_NE(r.output.find("rank 3 called all_reduce(count 1000, dtype fp16, reduce sum) at seq 1"),
            std::string::npos)
      << r.output;
}

TEST_F(WorkerLaunch, ReorderedOpIsIssuedAfterTheNextOne) {
  // Rank 1 postpones seq 2 (1000 elements) behind seq 3 (2000 elements): at the same position in
  // the call order it calls the bigger op while the others call the smaller one.
  auto r = launch(4, {"--ops", "6", "--timeout-ms", "10000", "--verify", "--alternate-counts"},
                  "comm.all_reduce[rank=1,seq=2]=reorder");
  EXPECT_EQ(r.exit_code, exit_code::kCommMismatch) << r.output;
  EXPECT_NE(r.output.find("rank 1 called all_reduce(count 2000, dtype fp32, reduce sum) at seq 3; "
                          "ranks 0,2-3 called all_reduce(count 1000, dtype fp32, reduce sum) at "
                          "seq 2"),
            std::string::npos)
      << r.output;
  // Without verify mode the mismatch is not detected where it happens: the sizes disagree on
  // the wire and the job fails or hangs later, as with a real order bug.
  env_["MASTER_PORT"] = std::to_string(free_port());
  r = launch(4, {"--ops", "6", "--timeout-ms", "3000", "--alternate-counts"},
             "comm.all_reduce[rank=1,seq=2]=reorder");
  EXPECT_NE(r.exit_code, 0) << r.output;
}

// send_recv's halves are ops of their own for the fault plan: re-shaped, the receiving rank
// gets a message of another size or type; postponed, the send goes out after the rank's next op,
// so the receiver takes the later message first (MPI matches by order between two ranks).
TEST_F(WorkerLaunch, SendRecvHalvesAreResizedRetypedAndReordered) {
  const std::vector<std::string> ring = {"--op",    "send_recv", "--ops",        "4",
                                         "--count", "100",       "--timeout-ms", "10000"};
  auto r = launch(4, ring, "comm.send_recv.send[rank=1,seq=2]=resize(-10)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 2] send_recv 2: element 90 from rank 1 is -1, not 2002 (what it "
                          "sent in op 2)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("[rank 2] send_recv 1:"), std::string::npos) << r.output;

  env_["MASTER_PORT"] = std::to_string(free_port());
  r = launch(4, ring, "comm.send_recv.send[rank=1,seq=2]=retype(fp16)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(\[rank 2\] send_recv 2: element \d+ from rank 1 is \S+, not 2002)")))
      << r.output;

  env_["MASTER_PORT"] = std::to_string(free_port());
  r = launch(4, ring, "comm.send_recv.send[rank=1,seq=1]=reorder");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 2] send_recv 1: element 0 from rank 1 is 2002, not 1002"),
            std::string::npos)
      << r.output;
  // The postponed send reads the caller's buffer when it goes out, after op 2: by then it holds
  // op 2's data, so op 2 receives what it expects.
  EXPECT_EQ(r.output.find("[rank 2] send_recv 2:"), std::string::npos) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] 4 ops done"), std::string::npos)
        << r.output;
  }
}

// A split postponed by a reorder fault: the rank gets no group, its next op on the world meets
// the others' split (a named mismatch in verify mode), and the postponed exchange owns its memory.
TEST_F(WorkerLaunch, ReorderedSplitLeavesTheRankWithoutAGroup) {
  auto r = launch(
      4, {"--op", "split", "--ops", "3", "--count", "100", "--timeout-ms", "10000", "--verify"},
      "comm.split[rank=1]=reorder");
  EXPECT_EQ(r.exit_code, exit_code::kCommMismatch) << r.output;
  EXPECT_NE(r.output.find("[rank 1] split gave no group"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collective mismatch on group 'world': rank 1 called all_reduce(count "
                          "100, dtype fp32, reduce sum) at seq 1; ranks 0,2-3 called split("),
            std::string::npos)
      << r.output;
}

TEST_F(WorkerLaunch, WorldSizeDisagreementNamesTheRanks) {
  auto r = launch_with_last_rank_env(4, "WORLD_SIZE=8");
  EXPECT_EQ(r.exit_code, exit_code::kRendezvous) << r.output;
  EXPECT_NE(r.output.find("world size mismatch: rank 3 reports world size 8, ranks 0-2 report "
                          "world size 4"),
            std::string::npos)
      << r.output;
}

TEST_F(WorkerLaunch, DuplicateRankNamesBothProcessesAndTheMissingRank) {
  auto r = launch_with_last_rank_env(4, "RANK=1");
  EXPECT_EQ(r.exit_code, exit_code::kRendezvous) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(
          R"(rank 1 is claimed by 2 processes \(pid \d+ on host \S+, pid \d+ on host \S+\); no process has rank 3)")))
      << r.output;
}

TEST_F(WorkerLaunch, FiredLogRecordsEveryFiringAndTheSameSeedFiresTheSameHits) {
  auto fired = [&](const std::string& seed) {
    env_["FAULTLINE_FAULT_SEED"] = seed;
    env_["FAULTLINE_FIRED_LOG"] = (dir_ / ("fired-" + seed + ".jsonl")).string();
    fs::remove(env_["FAULTLINE_FIRED_LOG"]);
    auto r = launch(2, {"--ops", "20"}, "comm.all_reduce=50%sleep(1)");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(env_["FAULTLINE_FIRED_LOG"]);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  auto a = fired("11"), b = fired("11"), c = fired("12");
  EXPECT_GT(a.size(), 5u);
  EXPECT_LT(a.size(), 35u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a[0].find("\"site\":\"comm.all_reduce\""), std::string::npos) << a[0];
  EXPECT_NE(a[0].find("\"action\":\"sleep(1)\""), std::string::npos) << a[0];
}

TEST_F(WorkerLaunch, MalformedPlanIsRefusedWithItsPosition) {
  auto r = launch(2, {}, "comm.all_reduce[rank=2]=slep(5)");
  EXPECT_EQ(r.exit_code, exit_code::kUsage) << r.output;
  EXPECT_NE(r.output.find("FAULTLINE_FAULTS: at column 25: expected an action (off, error"),
            std::string::npos)
      << r.output;
}

TEST_F(WorkerLaunch, MissingRankVariableIsNamed) {
  env_["RANK"] = "";
  env_["OMPI_COMM_WORLD_RANK"] = "";
  env_["WORLD_SIZE"] = "2";
  auto r = run_process({FAULTLINE_COMM_FAULT_WORKER}, env_);
  EXPECT_EQ(r.exit_code, exit_code::kUsage) << r.output;
  EXPECT_NE(r.output.find("RANK is not set"), std::string::npos) << r.output;
}

TEST_F(WorkerLaunch, SquattedStorePortIsReportedAsAddressInUse) {
  // Another process holds the port rank 0 must serve the store on.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 16), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  env_["MASTER_PORT"] = std::to_string(port);
  env_["FAULTLINE_STORE_TIMEOUT_MS"] = "3000";
  env_["FAULTLINE_RDZV_TIMEOUT_MS"] = "3000";
  auto r = launch(2, {});
  close(s);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rendezvous store cannot listen on 127.0.0.1:" + std::to_string(port) +
                          ": address already in use (EADDRINUSE)"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fl::test
