// The pickle writer and the flight recorder's PyTorch-schema dump, in one process: bytes of
// known encodings, the schema of a dump, and python3's pickle reading it back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/comm/fr_schema.hpp"
#include "tests/support/process.hpp"
#include "workloads/comm/flight_recorder.hpp"
#include "workloads/comm/pickle.hpp"

namespace fl::test {
namespace {

using fl::comm::to_pickle;
using nlohmann::json;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// The opcodes CPython's pickle.dumps(x, protocol=2) writes for the same value (less its memo
// entries, BINPUT, which a reader does not need).
TEST(Pickle, ScalarsMatchCPythonsProtocol2Bytes) {
  EXPECT_EQ(to_pickle(json(nullptr)), bytes({0x80, 2, 'N', '.'}));
  EXPECT_EQ(to_pickle(json(true)), bytes({0x80, 2, 0x88, '.'}));
  EXPECT_EQ(to_pickle(json(false)), bytes({0x80, 2, 0x89, '.'}));
  EXPECT_EQ(to_pickle(json(1)), bytes({0x80, 2, 'K', 1, '.'}));
  EXPECT_EQ(to_pickle(json(300)), bytes({0x80, 2, 'M', 0x2c, 0x01, '.'}));
  EXPECT_EQ(to_pickle(json(-1)), bytes({0x80, 2, 'J', 0xff, 0xff, 0xff, 0xff, '.'}));
  EXPECT_EQ(to_pickle(json(1LL << 40)), bytes({0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0, 1, '.'}));
  EXPECT_EQ(to_pickle(json(-(1LL << 40))), bytes({0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0, 0xff, '.'}));
  EXPECT_EQ(to_pickle(json(2147483648LL)), bytes({0x80, 2, 0x8a, 5, 0, 0, 0, 0x80, 0, '.'}));
  EXPECT_EQ(to_pickle(json(1.5)), bytes({0x80, 2, 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, '.'}));
  EXPECT_EQ(to_pickle(json("ab")), bytes({0x80, 2, 'X', 2, 0, 0, 0, 'a', 'b', '.'}));
}

TEST(Pickle, ContainersAndTuplesByKey) {
  EXPECT_EQ(to_pickle(json::array()), bytes({0x80, 2, ']', '.'}));
  EXPECT_EQ(to_pickle(json::object()), bytes({0x80, 2, '}', '.'}));
  EXPECT_EQ(to_pickle(json::array({1, 2})), bytes({0x80, 2, ']', '(', 'K', 1, 'K', 2, 'e', '.'}));
  const json d = {{"t", {1}}, {"l", {1}}};
  // nlohmann orders keys: "l" then "t"; only "t" becomes a tuple.
  EXPECT_EQ(to_pickle(d, {"t"}),
            bytes({0x80, 2,   '}', '(', 'X', 1, 0,   0,   0,   'l', ']', '(', 'K', 1,
                   'e',  'X', 1,   0,   0,   0, 't', '(', 'K', 1,   't', 'u', '.'}));
}

class FrDump : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_test_dir("fr", testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

comm::FlightEntry op(comm::OpKind k, int pg, int group_rank, int size, size_t count,
                     int peer = -1) {
  comm::FlightEntry e;
  e.op = k;
  e.group = pg == 0 ? "world" : "tp";
  e.pg_id = pg;
  e.group_rank = group_rank;
  e.group_size = size;
  e.count = count;
  e.peer = peer;
  e.timeout_ms = 5000;
  return e;
}

TEST_F(FrDump, HoldsGroupsCountersAndStatesInPytorchsSchema) {
  auto rec = std::make_shared<comm::FlightRecorder>(16);
  rec->register_group(rec->reserve_pg_id(), "default_pg", {0, 1, 2, 3});
  rec->register_group(rec->reserve_pg_id(), "tp", {2, 3});
  using comm::OpKind;
  using comm::OpState;
  const auto a = rec->record(op(OpKind::kAllReduce, 0, 2, 4, 8));
  rec->set_state(a, OpState::kStarted);
  rec->set_state(a, OpState::kCompleted);
  const auto s = rec->record(op(OpKind::kSend, 1, 0, 2, 3, 1));
  rec->set_state(s, OpState::kStarted);
  rec->set_state(s, OpState::kCompleted);
  const auto g = rec->record(op(OpKind::kAllGather, 1, 0, 2, 4));
  rec->set_state(g, OpState::kStarted);
  rec->set_state(g, OpState::kTimedOut);
  rec->record(op(OpKind::kReduceScatter, 0, 2, 4, 8));

  const std::string first = rec->dump(dir_.string(), 2, "test");
  EXPECT_EQ(first, (dir_ / "flight_recorder_rank2.json").string());
  std::ifstream in(dir_ / "fr_trace_rank_2.json");
  ASSERT_TRUE(in.good());
  const json t = json::parse(in);
  expect_pytorch_fr_schema(t, "unit dump");
  EXPECT_EQ(t["version"], "2.10");
  EXPECT_EQ(t["pg_config"]["0"]["ranks"], "[0, 1, 2, 3]");
  EXPECT_EQ(t["pg_config"]["0"]["desc"], "default_pg");
  EXPECT_EQ(t["pg_config"]["1"]["ranks"], "[2, 3]");
  EXPECT_EQ(t["pg_config"]["1"]["desc"], "tp");
  EXPECT_EQ(t["pg_status"]["0"]["last_enqueued_collective"], 2);
  EXPECT_EQ(t["pg_status"]["0"]["last_completed_collective"], 1);
  EXPECT_EQ(t["pg_status"]["1"]["last_started_collective"], 1);
  EXPECT_EQ(t["pg_status"]["1"]["last_completed_collective"], -1);
  const auto& e = t["entries"];
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0]["profiling_name"], "nccl:all_reduce");
  EXPECT_EQ(e[0]["process_group"], json::array({"0", "default_pg"}));
  EXPECT_EQ(e[0]["collective_seq_id"], 1);
  EXPECT_EQ(e[0]["state"], "completed");
  EXPECT_TRUE(e[0]["retired"].get<bool>());
  EXPECT_TRUE(e[0]["duration_ms"].is_number());
  EXPECT_EQ(e[0]["input_sizes"], json::parse("[[8]]"));
  EXPECT_EQ(e[0]["input_dtypes"], json::parse(R"(["Float"])"));
  // p2p: the p2p counter moves, the collective one stays; group ranks in the name.
  EXPECT_EQ(e[1]["profiling_name"], "nccl:send 0->1");
  EXPECT_TRUE(e[1]["is_p2p"].get<bool>());
  EXPECT_EQ(e[1]["p2p_seq_id"], 1);
  EXPECT_EQ(e[1]["collective_seq_id"], 0);
  EXPECT_EQ(e[2]["profiling_name"], "nccl:_all_gather_base");
  EXPECT_EQ(e[2]["collective_seq_id"], 1);
  EXPECT_EQ(e[2]["op_id"], 2);
  EXPECT_EQ(e[2]["output_sizes"], json::parse("[[8]]"));
  // Timed out: started, never completed, retired.
  EXPECT_EQ(e[2]["state"], "started");
  EXPECT_TRUE(e[2]["retired"].get<bool>());
  EXPECT_TRUE(e[2]["time_discovered_completed_ns"].is_null());
  EXPECT_TRUE(e[2]["duration_ms"].is_null());
  EXPECT_EQ(e[2]["timeout_ms"], 5000);
  EXPECT_EQ(e[3]["profiling_name"], "nccl:_reduce_scatter_base");
  EXPECT_EQ(e[3]["state"], "scheduled");
  EXPECT_FALSE(e[3]["retired"].get<bool>());
  EXPECT_EQ(e[3]["output_sizes"], json::parse("[[2]]"));
  EXPECT_EQ(e[3]["collective_seq_id"], 2);

  const std::string rt = python_pickle_roundtrip((dir_ / "nccl_trace_rank_2").string(),
                                                 (dir_ / "fr_trace_rank_2.json").string());
  if (rt == "skip") GTEST_SKIP() << "no /usr/bin/python3 to decode the pickle";
  EXPECT_EQ(rt, "");
}

TEST_F(FrDump, LargeAndNegativeIntegersRoundTripThroughPython) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const json v = {{"v", json::array({0, 255, 256, 65535, 65536, -1, -129, 2147483647, -2147483648LL,
                                     2147483648LL, INT64_MAX, INT64_MIN, UINT64_MAX, 1.25, -0.0,
                                     "é", nullptr, true})}};
  {
    std::ofstream(dir_ / "p", std::ios::binary) << to_pickle(v);
    std::ofstream(dir_ / "j") << v.dump();
  }
  auto r = run_process({"/usr/bin/python3", "-c",
                        "import json,pickle,sys\n"
                        "p=pickle.load(open(sys.argv[1],'rb')); j=json.load(open(sys.argv[2]))\n"
                        "sys.exit(0 if p==j else 'differ: %r vs %r' % (p, j))",
                        (dir_ / "p").string(), (dir_ / "j").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace fl::test
