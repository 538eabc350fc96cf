// Scoring is a pure function of run directories: hand-written histories with known ground truth
// and diagnoses must give exactly the recall, precision, latency, accuracy, localisation and
// false-alarm figures worked out here. Also: tool resolution and the control plane withholding
// ground truth from detectors.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/control/controller.hpp"
#include "harness/launch/tools.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/score/score.hpp"
#include "tests/support/fake_run.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

using test::FakeRun;

const char* const kPositive = test::kPositiveScenario;
const char* const kClean = test::kCleanScenario;

std::string root() {
  return test::fresh_test_dir("score",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

const DetectorScore& by_name(const std::vector<DetectorScore>& v, const std::string& n) {
  for (auto& s : v) {
    if (s.detector == n) return s;
  }
  throw std::runtime_error("no score for " + n);
}

// Four runs under `dir`: two positives (one that "comm" and "logs" detect, one only "logs"
// does), a clean run of 36 s with one alarm, and a positive whose symptom never showed.
void write_scored_runs(const std::string& dir) {
  {
    // Positive: the fault fires at 2 s, the oracle sees the symptom on rank 1 at 3 s.
    FakeRun p(dir, "a", kPositive);
    p.ev(0, "harness", -1, "run_start", {{"ranks", 2}});
    p.launch(1.0, 2);
    p.diag(1.5, "comm", "4.7", {0});  // before the injection: a false alarm
    p.ev(2.0, "rank", 1, "fault_fired", {{"site", "comm.all_reduce"}});
    p.ev(3.0, "harness", 1, "output", {{"line", "worker error (comm timeout): ..."}});
    p.diag(3.5, "comm", "4.7", {1, 0});  // detected 1.5 s after injection, 0.5 s after oracle
    p.diag(4.0, "logs", "4.8", {0});     // detected, wrong symptom, wrong rank
    p.ev(5.0, "harness", -1, "run_end", {});
  }
  {
    // Positive where only "logs" detects.
    FakeRun p(dir, "b", kPositive);
    p.ev(0, "harness", -1, "run_start", {{"ranks", 2}});
    p.launch(0.5, 2);
    p.ev(1.0, "harness", 0, "output", {{"line", "comm timeout"}});
    p.diag(1.5, "logs", "4.7", {0});
    p.ev(2.0, "harness", -1, "run_end", {});
  }
  {
    // Clean run of 36 s: one alarm from "logs".
    FakeRun c(dir, "c", kClean);
    c.ev(0, "harness", -1, "run_start", {{"ranks", 2}});
    c.launch(0, 2);
    c.diag(10, "logs", "4.11", {1});
    for (int r = 0; r < 2; ++r) {
      c.ev(36, "harness", r, "rank_exit", {{"class", "ok"}, {"code", 0}, {"by_harness", false}});
    }
    c.ev(36, "harness", -1, "run_end", {});
  }
  {
    // A positive whose symptom never showed: excluded.
    FakeRun x(dir, "d", kPositive);
    x.launch(0, 2);
    x.diag(1, "comm", "4.7", {0});
    x.ev(2, "harness", -1, "run_end", {});
  }
}

TEST(Score, RecallPrecisionLatencyLocalisationAndFalseAlarms) {
  const auto dir = root();
  write_scored_runs(dir);
  std::vector<RunTruth> runs;
  for (auto& d : collect_run_dirs({dir})) runs.push_back(load_run_truth(d));
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].cls, "positive");
  EXPECT_EQ(runs[0].t_inject_ns, 2'000'000'000);
  EXPECT_EQ(runs[0].t_manifest_ns, 3'000'000'000);
  EXPECT_EQ(runs[2].cls, "negative");
  EXPECT_EQ(runs[3].cls, "excluded");
  const auto scores = score_detectors(runs);
  ASSERT_EQ(scores.size(), 3u);  // comm, logs, any
  const auto& comm = by_name(scores, "comm");
  EXPECT_EQ(comm.positives, 2);
  EXPECT_EQ(comm.negatives, 1);
  EXPECT_EQ(comm.excluded, 1);
  EXPECT_EQ(comm.tp, 1);
  EXPECT_EQ(comm.fn, 1);
  EXPECT_EQ(comm.early, 1);
  EXPECT_DOUBLE_EQ(comm.recall(), 0.5);
  EXPECT_DOUBLE_EQ(comm.precision(), 1.0);
  ASSERT_EQ(comm.latency_inject_s.size(), 1u);
  EXPECT_NEAR(comm.latency_inject_s[0], 1.5, 1e-9);
  EXPECT_NEAR(comm.latency_manifest_s[0], 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(comm.symptom.value(), 1.0);
  const auto& logs = by_name(scores, "logs");
  EXPECT_EQ(logs.tp, 2);
  EXPECT_EQ(logs.fp_runs, 1);
  EXPECT_EQ(logs.fp_alarms, 1);
  EXPECT_NEAR(logs.clean_hours, 36.0 / 3600, 1e-12);
  EXPECT_NEAR(logs.fp_per_hour(), 100.0, 1e-9);
  EXPECT_NEAR(logs.precision(), 2.0 / 3, 1e-12);
  EXPECT_NEAR(logs.symptom.value(), 0.5, 1e-12);  // 4.8 on run a, 4.7 on run b
  EXPECT_NEAR(logs.stage.value(), 1.0, 1e-12);    // both stage 4
  EXPECT_EQ(logs.by_stage.at(4).hit, 2);
  // Localisation: run a's oracle names rank 1 (the output line's rank) ...
  EXPECT_EQ(runs[0].ranks, std::vector<int>{1});
  EXPECT_DOUBLE_EQ(comm.top1.value(), 1.0);  // comm said [1, 0]: top-1 right
  EXPECT_NEAR(comm.jaccard(), 0.5, 1e-12);   // {0,1} vs {1}
  const auto& any = by_name(scores, "any");
  EXPECT_EQ(any.tp, 2);
  EXPECT_NEAR(any.latency_inject_s[0], 1.5, 1e-9);  // the earliest valid diagnosis of run a
  const std::string table = scores_table(scores, true);
  // Every cell states its interval and the counts behind it: recall 1/2 (Wilson [9%, 91%]),
  // precision 1/1 ([21%, 100%]), no clean hour without alarms for comm: 0 in 0.010 h.
  EXPECT_NE(table.find("| comm | 50% [9-91] 1/2 | 100% [21-100] 1/1 |"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| 0 [0-369] 0 in 0.010 h |"), std::string::npos) << table;
  const auto j = scores_json(scores);
  EXPECT_EQ(j[0]["detector"], "comm");
  EXPECT_EQ(j[0]["recall_by_symptom"]["4.7"]["positives"], 2);
  EXPECT_NEAR(j[0]["recall_ci95"][0].get<double>(), wilson(1, 2).lo, 1e-12);
  EXPECT_EQ(j[0]["precision_n"], 1);
  EXPECT_EQ(j[0]["latency_from_injection_s"]["n"], 1);
}

TEST(Score, SweepVariantsStayOutOfTheEnsemble) {
  const auto dir = root();
  FakeRun c(dir, "c", kClean);
  c.launch(0, 1);
  c.diag(1, "hang,floor-s=1", "4.11", {0});
  c.ev(2, "harness", 0, "rank_exit", {{"class", "ok"}, {"code", 0}, {"by_harness", false}});
  c.ev(2, "harness", -1, "run_end", {});
  c.hist.close();
  const auto scores = score_detectors({load_run_truth(c.dir)});
  EXPECT_EQ(by_name(scores, "hang,floor-s=1").fp_alarms, 1);
  EXPECT_EQ(by_name(scores, "any").fp_alarms, 0);
}

TEST(Score, Percentiles) {
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 95), 4.8);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

TEST(Score, NotARunDirectoryIsAClearError) {
  const auto dir = root();
  fs::create_directories(dir + "/empty");
  try {
    collect_run_dirs({dir + "/empty"});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("holds no run directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_run_truth(dir + "/empty"), std::exception);
}

TEST(Tools, BaselineExpandsAndVariantsGetTheirOwnNames) {
  auto t = resolve_tools({"baseline", "hang --floor-s 2"}, "shrink");
  const auto& base = baseline_detectors();  // harness/detectors/CMakeLists.txt's list
  ASSERT_EQ(t.size(), base.size() + 2);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(t[i].name, base[i]);
  EXPECT_EQ(base.front(), "hang");
  EXPECT_NE(std::find(base.begin(), base.end(), "exits"), base.end());
  const size_t n = base.size();
  EXPECT_EQ(t[n].name, "hang,floor-s=2");
  EXPECT_EQ(t[n].argv.back(), "2");
  EXPECT_EQ(t[n + 1].name, "recover");
  EXPECT_TRUE(t[n + 1].recovery);
  EXPECT_EQ(t[n + 1].argv[2], "shrink");
  EXPECT_THROW(resolve_tools({"./no/such/detector"}, ""), fl::ConfigError);
  EXPECT_THROW(resolve_tools({"  "}, ""), fl::ConfigError);
  // Two tools of one name are told apart.
  auto twice = resolve_tools({"comm", "comm"}, "");
  EXPECT_EQ(twice[1].name, "comm-2");
}

TEST(ControlPlane, GroundTruthIsWithheldUnlessAskedFor) {
  const auto dir = root();
  History h(dir + "/history.jsonl");
  Controller c(
      h, [](const ControlAction&) { return ControlResult{}; }, "score-test");
  const auto addr = c.start("127.0.0.1:0");
  h.harness("run_start", {{"ranks", 2}, {"expect", {{"symptom", "4.11"}}}});
  h.harness("fault_injected", {{"fault", "signal"}});
  h.harness("launch", {{"pid", 1}}, 0);
  auto observe = [&](bool truth) {
    auto stub = faultline::v1::Controller::NewStub(
        grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata(kControlSecretHeader, "score-test");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    faultline::v1::ObserveRequest req;
    req.set_from_start(true);
    req.set_include_ground_truth(truth);
    auto reader = stub->Observe(&ctx, req);
    std::vector<std::pair<std::string, std::string>> got;
    faultline::v1::Event e;
    while (reader->Read(&e)) got.push_back({e.kind(), e.data_json()});
    return got;
  };
  auto hidden = observe(false);
  ASSERT_EQ(hidden.size(), 2u);
  EXPECT_EQ(hidden[0].first, "run_start");
  EXPECT_EQ(hidden[0].second.find("expect"), std::string::npos) << hidden[0].second;
  EXPECT_EQ(hidden[1].first, "launch");
  auto all = observe(true);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].first, "fault_injected");
  EXPECT_NE(all[0].second.find("expect"), std::string::npos);
  c.shutdown();
}

}  // namespace
}  // namespace fl::harness
