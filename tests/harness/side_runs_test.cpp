// Issue 20 end to end: the after_prepare step converts the preparation's checkpoint so the run
// can resume from it, a reference run beside the run feeds the baseline oracle, and a plan that
// never fired is reported as armed, not injected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "harness/run/runner.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

class SideRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    dir_ = fl::test::fresh_test_dir(
        "side-runs", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  RunResult run(const std::string& yaml, const LoadOptions& lo = {}) {
    const auto file = (dir_ / "s.yaml").string();
    std::ofstream(file) << yaml;
    RunOptions o;
    o.results_dir = (dir_ / "runs").string();
    o.print_summary = false;
    return run_scenario(load_scenario(file, lo), o);
  }
  static std::vector<nlohmann::json> events(const std::string& run_dir, const std::string& kind) {
    std::vector<nlohmann::json> out;
    for (const auto& e : read_history(run_dir + "/history.jsonl")) {
      if (e.source == "harness" && e.kind == kind)
        out.push_back(nlohmann::json::parse(e.data_json));
    }
    return out;
  }
  fs::path dir_;
};

constexpr const char* kReshard = R"(name: reshard
topology: {ranks: 2, dp: 2}
workload: {steps: 4, checkpoint: {resume: true}}
prepare:
  topology: {ranks: 4, dp: 4}
  workload: {steps: 2, checkpoint: {every: 2, resume: false}}
timeouts: {comm_ms: 5000, run_s: 120}
expect: {oracle: completed}
)";

TEST_F(SideRuns, AfterPrepareConvertsTheCheckpointTheRunResumesFrom) {
  // Without the step the dp-4 checkpoint does not load at dp 2...
  const auto plain = run(kReshard);
  EXPECT_EQ(plain.verdict.outcome, "fail") << plain.verdict.explanation;
  // ...with it, fl-ckpt reshard writes the dp-2 checkpoint into the run's checkpoints/.
  LoadOptions lo;
  lo.overrides = {
      "after_prepare=[fl-ckpt, reshard, --in, prepare/checkpoints, --out, checkpoints, --dp, '2']"};
  const auto r = run(kReshard, lo);
  EXPECT_EQ(r.verdict.outcome, "pass") << r.verdict.explanation << " " << r.harness_error;
  const auto step = events(r.run_dir, "after_prepare");
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0]["status"], 0);
  EXPECT_EQ(step[0]["argv"][1], "reshard");
  std::ifstream manifest(r.run_dir + "/checkpoints/step_2/manifest.json");
  EXPECT_EQ(nlohmann::json::parse(manifest)["layout"]["dp"], 2);
}

TEST_F(SideRuns, AFailingStepStopsTheRunBeforeAnyRankStarts) {
  LoadOptions lo;
  lo.overrides = {"after_prepare=[fl-ckpt, inspect, no-such-checkpoint]"};
  const auto r = run(kReshard, lo);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.harness_error.find("after_prepare [fl-ckpt inspect no-such-checkpoint] failed"),
            std::string::npos)
      << r.harness_error;
  EXPECT_TRUE(events(r.run_dir, "launch").empty());
}

TEST_F(SideRuns, TheReferenceRunFeedsTheBaselineOracleAndAPlanThatNeverFiredIsReported) {
  // The same job as its reference (memory in use is bytes, not time: the verdict cannot depend
  // on the host's load), with a plan whose site the job never reaches (it saves no checkpoint).
  const auto r = run(R"y(name: same
topology: {ranks: 2, dp: 2}
workload: {steps: 6}
faults:
  - plan: "checkpoint.write=error"
expect: {oracle: baseline, measure: memory, factor: 1.5, absent: true}
timeouts: {run_s: 120}
)y");
  EXPECT_EQ(r.verdict.outcome, "pass") << r.verdict.explanation << " " << r.harness_error;
  EXPECT_NE(r.verdict.explanation.find("in the reference run (1.0x; threshold 1.5x)"),
            std::string::npos)
      << r.verdict.explanation;
  const auto ref = events(r.run_dir, "baseline");
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_EQ(ref[0]["outcome"], "pass");
  EXPECT_EQ(ref[0]["steps"].size(), 12u);  // 6 steps on 2 ranks
  EXPECT_TRUE(fs::exists(r.run_dir + "/baseline/history.jsonl"));
  // The reference ran without the scenario's faults.
  std::ifstream plan(r.run_dir + "/baseline/fault-plan.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(plan), {}), "");
  // The plan never fired: a warning, and not "injected".
  std::ifstream vin(r.run_dir + "/verdict.json");
  const auto v = nlohmann::json::parse(vin);
  ASSERT_EQ(v["warnings"].size(), 1u);
  EXPECT_NE(v["warnings"][0].get<std::string>().find(
                "'checkpoint.write=error' was armed but never fired"),
            std::string::npos);
}

}  // namespace
}  // namespace fl::harness
