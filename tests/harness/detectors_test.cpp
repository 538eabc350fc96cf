// Detectors and recovery end to end: tools started beside real runs over the control plane, their
// diagnoses in the history, the minimal C++ and Python examples, a decoy that shows the hang
// detector's threshold trade-off, and every recovery policy bringing its run back to completion
// (bench-recovery), with final parameters bitwise equal to the fault-free run after a restart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "harness/launch/tools.hpp"
#include "harness/score/score.hpp"
#include "tests/comm/fr_schema.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = FAULTLINE_SOURCE_DIR;

std::string results_dir() {
  return test::fresh_test_dir("detectors",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

struct Run {
  test::ProcessResult proc;
  std::string dir;
  std::vector<HistoryEvent> history;
  std::vector<nlohmann::json> diagnoses;
  int count(const std::string& kind) const {
    int n = 0;
    for (auto& e : history) n += e.kind == kind ? 1 : 0;
    return n;
  }
};

Run cli_run(const std::string& scenario, std::vector<std::string> extra) {
  const auto results = results_dir() + "/" + fs::path(scenario).stem().string();
  fs::create_directories(results);
  std::vector<std::string> argv{FAULTLINE_CLI, "run", scenario, "--results", results};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Run r;
  r.proc = test::run_process(argv, {}, std::chrono::seconds(150));
  for (auto& e : fs::directory_iterator(results)) r.dir = e.path().string();
  if (r.dir.empty()) return r;
  r.history = read_history(r.dir + "/history.jsonl");
  for (auto& e : r.history) {
    if (e.kind == "diagnosis") r.diagnoses.push_back(nlohmann::json::parse(e.data_json));
  }
  return r;
}

TEST(Detectors, BaselineFindsAndLocalisesAFrozenRank) {
  auto r = cli_run(kSrc + "/scenarios/symptoms/4.11-frozen-rank.yaml", {"--detector", "baseline"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  const int baselines = static_cast<int>(baseline_detectors().size());
  EXPECT_EQ(r.count("tool_start"), baselines);
  EXPECT_EQ(r.count("run_ending"), 1);
  EXPECT_EQ(r.count("tool_exit"), baselines);  // every tool left on its own after run_ending
  bool hang = false;
  for (auto& d : r.diagnoses) {
    if (d["detector"] == "hang") {
      hang = true;
      EXPECT_EQ(d["symptom"], "4.11");
      EXPECT_EQ(d["stage"], 4);
      EXPECT_EQ(d["ranks"], nlohmann::json::array({2})) << d.dump();  // frozen: no heartbeat
    }
  }
  EXPECT_TRUE(hang) << r.proc.output;
  // The hang watchdog asked every live rank for a flight-recorder dump before the teardown: the
  // frozen rank cannot write one, the others' PyTorch-schema dumps agree on the all-reduce the
  // frozen rank never joined.
  nlohmann::json asked;
  for (auto& e : r.history) {
    if (e.kind == "flight_recorder_dump") asked = nlohmann::json::parse(e.data_json);
  }
  ASSERT_TRUE(asked.is_object()) << "no flight_recorder_dump event";
  EXPECT_EQ(asked["frozen"], nlohmann::json::array({2}));
  EXPECT_EQ(asked["signalled"], nlohmann::json::array({0, 1, 3}));
  ASSERT_FALSE(asked["dumped"].empty()) << asked.dump();
  EXPECT_FALSE(fs::exists(r.dir + "/ranks/rank2/nccl_trace_rank_2"));
  std::set<std::pair<int64_t, int64_t>> last_open;  // (pg_id, collective_seq_id)
  for (int rank : asked["dumped"]) {
    std::ifstream in(r.dir + "/ranks/rank" + std::to_string(rank) + "/fr_trace_rank_" +
                     std::to_string(rank) + ".json");
    ASSERT_TRUE(in.good()) << rank;
    const auto t = nlohmann::json::parse(in);
    test::expect_pytorch_fr_schema(t, "rank " + std::to_string(rank));
    ASSERT_FALSE(t["entries"].empty());
    const auto& last = t["entries"].back();
    EXPECT_EQ(last["state"], "started");
    EXPECT_EQ(last["profiling_name"], "nccl:all_reduce");
    last_open.insert({last["pg_id"].get<int64_t>(), last["collective_seq_id"].get<int64_t>()});
  }
  EXPECT_EQ(last_open.size(), 1u) << "the waiting ranks' open all-reduces differ";
  // A tool's output stays in its own log, out of the history other detectors read.
  EXPECT_TRUE(fs::exists(r.dir + "/tools/hang.log"));
  for (auto& e : r.history) {
    if (e.kind == "output") {
      EXPECT_EQ(e.data_json.find("diagnosis"), std::string::npos);
    }
  }
}

TEST(Detectors, LogClassifierAndCommAnalyserNameTheSymptom) {
  auto r = cli_run(kSrc + "/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml",
                   {"--detector", "logs", "--detector", "comm", "--report"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_TRUE(fs::exists(r.dir + "/report.html")) << r.proc.output;  // run --report
  std::set<std::string> seen;
  for (auto& d : r.diagnoses) {
    seen.insert(d["detector"].get<std::string>() + ":" + d["symptom"].get<std::string>());
  }
  EXPECT_TRUE(seen.count("logs:4.6")) << r.proc.output;
  EXPECT_TRUE(seen.count("comm:4.6")) << r.proc.output;
}

// The Python example runs on the installed faultline_client package: ctest
// python.frozen_rank_detector (tests/harness/python_client_test.sh).
TEST(Detectors, MinimalCppExamplePostsDiagnoses) {
  auto r = cli_run(kSrc + "/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml",
                   {"--detector", FAULTLINE_EXAMPLE_DETECTOR});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  std::set<std::string> who;
  for (auto& d : r.diagnoses) who.insert(d["detector"].get<std::string>());
  EXPECT_TRUE(who.count("example")) << r.proc.output;
}

TEST(Detectors, ADecoyPauseIsAFalseAlarmOnlyForATightTimeout) {
  // The second checkpoint write takes 2.5 s longer: a 1 s hang timeout fires, a 16 s one not.
  const auto results = results_dir();
  auto r = cli_run(kSrc + "/scenarios/clean/decoy-slow-checkpoint.yaml",
                   {"--detector", "hang --floor-s 1 --k 2", "--detector", "hang --floor-s 16"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  const auto scores = score_detectors({load_run_truth(r.dir)});
  std::map<std::string, int> alarms;
  for (auto& s : scores) alarms[s.detector] = s.fp_alarms;
  // The tight timeout is max(1 s, 2 x the median step interval): below the 2.5 s pause as long as
  // a step takes under 1.25 s, however busy the host.
  EXPECT_GE(alarms["hang,floor-s=1,k=2"], 1);
  EXPECT_EQ(alarms["hang,floor-s=16"], 0);
  EXPECT_EQ(alarms["any"], 0);  // sweep variants stay out of the ensemble
}

TEST(Detectors, ScoreCommandReadsRunsAndRejectsOthers) {
  auto r = cli_run(kSrc + "/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml",
                   {"--detector", "logs"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  const std::string json = r.dir + "/../scores.json";
  auto s = test::run_process({FAULTLINE_CLI, "score", r.dir, "--json", json});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("logs"), std::string::npos) << s.output;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j[0]["detector"], "logs");
  EXPECT_EQ(j[0]["true_positives"], 1);
  auto bad = test::run_process({FAULTLINE_CLI, "score", "/nonexistent/run"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("/nonexistent/run: no such run or suite directory"), std::string::npos)
      << bad.output;
}

TEST(Recovery, EveryPolicyBringsItsRunBack) {
  const auto results = results_dir();
  auto b =
      test::run_process({FAULTLINE_CLI, "bench-recovery", kSrc + "/scenarios/suites/recovery.yaml",
                         "-j", "2", "--results", results},
                        {}, std::chrono::seconds(300));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  std::string dir;
  for (auto& e : fs::directory_iterator(results)) {
    if (fs::exists(e.path() / "recovery.json")) dir = e.path().string();
  }
  ASSERT_FALSE(dir.empty()) << b.output;
  std::ifstream in(dir + "/recovery.json");
  std::map<std::string, nlohmann::json> by;
  for (auto& s : nlohmann::json::parse(in)) by[s["scenario"]] = s;
  ASSERT_EQ(by.size(), 6u) << b.output;
  for (auto& [name, s] : by) {
    EXPECT_TRUE(s["recovered"].get<bool>()) << name << ": " << s.dump();
    EXPECT_EQ(s["restarts"], 1) << name;
    EXPECT_GE(s["time_to_recover_s"].get<double>(), 0) << name;
  }
  // Restarting from a checkpoint replays the same steps: bitwise the fault-free result.
  EXPECT_TRUE(by["killed-rank-restart"]["final_state_equal"].get<bool>())
      << by["killed-rank-restart"];
  EXPECT_TRUE(by["hung-rank-restart"]["final_state_equal"].get<bool>()) << by["hung-rank-restart"];
  EXPECT_GT(by["killed-rank-restart"]["steps_lost"].get<int>(), 0);
  // Shrinking changes the data order: the result differs, and says so.
  EXPECT_FALSE(by["killed-rank-shrink"]["final_state_equal"].get<bool>());
  // The shrunk job finished on two ranks, from a resharded checkpoint.
  const auto shrink_dir = by["killed-rank-shrink"]["run_dir"].get<std::string>();
  bool resharded = false;
  for (auto& e : read_history(shrink_dir + "/history.jsonl")) {
    if (e.kind == "restart") {
      auto d = nlohmann::json::parse(e.data_json);
      EXPECT_EQ(d["ranks"], 2);
      resharded = d["from"].get<std::string>().find("checkpoints-dp2") != std::string::npos;
    }
  }
  EXPECT_TRUE(resharded);
}

}  // namespace
}  // namespace fl::harness
