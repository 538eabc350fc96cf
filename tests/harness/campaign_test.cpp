// Campaigns and shrinking (harness/campaign): ddmin on synthetic predicates, the spec's errors at
// file:line:col, byte-for-byte determinism of the generated files, and (label mpi) a small real
// campaign with its ground truth and a planted three-fault run shrunk to the fault that matters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/campaign/campaign.hpp"
#include "harness/campaign/ddmin.hpp"
#include "harness/campaign/shrink.hpp"
#include "harness/model/scenario.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/process.hpp"
#include "tests/support/scenario_files.hpp"

namespace fs = std::filesystem;
using fl::harness::ScenarioError;
using fl::harness::campaign::ddmin;
using fl::harness::campaign::DdminResult;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[maybe_unused]] bool has(const std::vector<size_t>& s, size_t x) {
  return std::find(s.begin(), s.end(), x) != s.end();
}

}  // namespace

#ifndef FAULTLINE_CLI

TEST(Ddmin, FindsTheOneFailingElementOfThreeInThreeTests) {
  std::vector<std::vector<size_t>> asked;
  const DdminResult r = ddmin(3, [&](const std::vector<size_t>& s) {
    asked.push_back(s);
    return has(s, 1) ? 1 : 0;
  });
  EXPECT_EQ(r.kept, (std::vector<size_t>{1}));
  EXPECT_EQ(r.tests, 3);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(asked, (std::vector<std::vector<size_t>>{{0, 1}, {0}, {1}}));
}

TEST(Ddmin, FindsTwoElementsThatFailOnlyTogetherAndNeverAsksTwice) {
  std::set<std::vector<size_t>> asked;
  int repeats = 0;
  const DdminResult r = ddmin(8, [&](const std::vector<size_t>& s) {
    if (!asked.insert(s).second) ++repeats;
    EXPECT_FALSE(s.empty());
    EXPECT_LT(s.size(), 8u);
    return has(s, 2) && has(s, 5) ? 1 : 0;
  });
  EXPECT_EQ(r.kept, (std::vector<size_t>{2, 5}));
  EXPECT_EQ(repeats, 0);
  EXPECT_EQ(r.tests, static_cast<int>(asked.size()));
}

TEST(Ddmin, KeepsEverythingWhenNoSmallerSetFails) {
  const DdminResult r = ddmin(4, [](const std::vector<size_t>&) { return 0; });
  EXPECT_EQ(r.kept, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_FALSE(r.stopped);
}

TEST(Ddmin, StopsWithTheBestSoFarWhenTheTestSaysStop) {
  int calls = 0;
  const DdminResult r = ddmin(6, [&](const std::vector<size_t>& s) {
    if (++calls > 1) return -1;
    return has(s, 4) ? 1 : 0;  // the first half, {0, 1, 2}, does not fail
  });
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.tests, 2);
  EXPECT_EQ(r.kept, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
}

#endif

namespace {

constexpr const char* kSpec = R"Y(name: t
workload:
  layouts:
    - {ranks: 2, dp: 2, weight: 2}
    - {ranks: 4, dp: 2, tp: 2}
  precisions: {fp32: 3, bf16: 1}
  steps: [8, 12]
faults:
  count: {0: 1, 1: 2, 2: 2, 3: 1}
  mix:
    - name: slow
      weight: 2
      fault: {plan: "data.fetch[rank={rank},step={step}-1000]=delay(150)"}
      expect: {symptom: "4.1", oracle: throughput_degradation, after_step: "{step}", factor: 4,
               slowed: rank}
    - name: frozen
      fault: {signal: STOP, rank: "{rank}", step: "{step}"}
      expect: {symptom: "4.11", oracle: hang, hang_s: 4, ranks: ["{rank}"]}
    - name: killed
      fault: {signal: KILL, rank: "{rank}", step: "{step}"}
      expect: {oracle: exit_class, exit_class: signal, ranks: ["{rank}"]}
when: {step: {min: 2, max: 4}}
cascades:
  - {from: slow, to: killed, probability: 0.7, lag: {min: 1, max: 2}, rank: same}
clean:
  share: 0.25
  decoys:
    - name: hiccup
      fault: {plan: "data.fetch[rank={rank},step={step}]=sleep(40)"}
    - name: eval-pause
      workload: {eval_every: 4, args: ["--eval-batches", "20"]}
scenario:
  timeouts: {run_s: 60, comm_ms: 5000}
)Y";

}  // namespace

class CampaignSpec : public fl::test::ScenarioFiles {
 protected:
  CampaignSpec() : ScenarioFiles("campaign") {}
  // The error of a spec: kSpec with `from` replaced by `to`.
  std::string error_with(const std::string& from, const std::string& to) {
    std::string text = kSpec;
    const auto p = text.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    if (p != std::string::npos) text.replace(p, from.size(), to);
    try {
      fl::harness::campaign::load_spec(write("spec.yaml", text));
    } catch (const ScenarioError& e) {
      return fs::path(e.what()).string().substr(dir_.string().size() + 1);
    }
    return "";
  }
};

#ifndef FAULTLINE_CLI

TEST_F(CampaignSpec, TheExampleSpecLoads) {
  const auto s = fl::harness::campaign::load_spec(write("spec.yaml", kSpec));
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.layouts.size(), 2u);
  EXPECT_EQ(s.mix.size(), 3u);
  EXPECT_EQ(s.mix[0].sites, (std::vector<std::string>{"data.fetch"}));
  EXPECT_EQ(s.mix[1].kind, "signal");
  EXPECT_EQ(s.cascades.size(), 1u);
  EXPECT_DOUBLE_EQ(s.clean_share, 0.25);
}

TEST_F(CampaignSpec, AFaultWhoseSiteNoLayoutHasIsAnErrorAtItsPlan) {
  EXPECT_EQ(error_with("data.fetch[rank={rank},step={step}-1000]=delay(150)",
                       "comm.send[rank={rank}]=delay(150)"),
            "spec.yaml:13:21: faults.mix[0].fault: 'slow' has no site in any layout of "
            "workload.layouts: site 'comm.send': it needs pp > 1");
}

TEST_F(CampaignSpec, WeightsSummingToZeroAreAnError) {
  EXPECT_EQ(error_with("{fp32: 3, bf16: 1}", "{fp32: 0, bf16: 0}"),
            "spec.yaml:6:15: workload.precisions: the weights sum to 0 (nothing can be drawn)");
}

TEST_F(CampaignSpec, AnUnknownKeyNamesWhatIsAllowed) {
  EXPECT_EQ(error_with("  steps: [8, 12]", "  stepz: [8, 12]"),
            "spec.yaml:7:3: workload.stepz: unknown key (allowed here: layouts, precisions, "
            "models, steps, checkpoint_every)");
}

TEST_F(CampaignSpec, AWallClockTriggerIsRefusedWithTheReason) {
  EXPECT_EQ(error_with("when: {step: {min: 2, max: 4}}", "when: {time_s: {min: 2, max: 4}}"),
            "spec.yaml:22:8: when.time_s: unknown key (faults fire at a step, a collective seq or "
            "a hit count; the fault model has no wall-clock trigger) (allowed here: step, seq)");
}

TEST_F(CampaignSpec, ACascadeToAnUnknownFaultIsAnError) {
  EXPECT_EQ(error_with("to: killed", "to: kiled"),
            "spec.yaml:24:22: cascades[0].to: 'kiled' is not in faults.mix (allowed: slow, "
            "frozen, killed)");
}

TEST_F(CampaignSpec, ALayoutWhoseSizesDisagreeIsAnError) {
  EXPECT_EQ(error_with("{ranks: 4, dp: 2, tp: 2}", "{ranks: 4, dp: 4, tp: 2}"),
            "spec.yaml:5:7: workload.layouts[1]: dp 4 x tp 2 x pp 1 = 8 but ranks is 4 (they "
            "must be equal)");
}

TEST_F(CampaignSpec, SameSeedGivesTheSameRunsAndALongerCampaignStartsWithThem) {
  const auto s = fl::harness::campaign::load_spec(write("spec.yaml", kSpec));
  std::set<std::string> distinct;
  bool clean = false, cascade = false, several = false;
  for (int i = 1; i <= 40; ++i) {
    const auto a = fl::harness::campaign::generate_run(s, 7, i);
    EXPECT_EQ(a.yaml, fl::harness::campaign::generate_run(s, 7, i).yaml) << i;
    EXPECT_NE(a.yaml, fl::harness::campaign::generate_run(s, 8, i).yaml) << i;
    distinct.insert(a.yaml.substr(a.yaml.find("\ntopology")));
    clean = clean || a.clean;
    several = several || a.faults.size() >= 2;
    for (auto& f : a.faults) cascade = cascade || f.cascade_of >= 0;
  }
  EXPECT_GT(distinct.size(), 30u);
  EXPECT_TRUE(clean);
  EXPECT_TRUE(cascade);
  EXPECT_TRUE(several);
}

TEST_F(CampaignSpec, EveryGeneratedFileLoadsAndTwoCampaignsOfOneSeedAreByteForByteEqual) {
  const std::string spec = write("spec.yaml", kSpec);
  auto generate = [&](const std::string& out, int runs) {
    fl::harness::campaign::Options o;
    o.spec = spec;
    o.seed = 11;
    o.runs = runs;
    o.no_run = true;
    o.out_dir = (dir_ / out).string();
    return fl::harness::campaign::run_campaign(o);
  };
  generate("a", 12);
  generate("b", 12);
  generate("c", 16);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "a" / "scenarios")) {
    const auto name = e.path().filename();
    EXPECT_EQ(read(e.path()), read(dir_ / "b" / "scenarios" / name)) << name;
    EXPECT_EQ(read(e.path()), read(dir_ / "c" / "scenarios" / name)) << name;
    EXPECT_NO_THROW(fl::harness::load_scenario(e.path().string())) << name;
    ++files;
  }
  EXPECT_EQ(files, 12);
  EXPECT_EQ(read(dir_ / "a" / "manifest.json"), read(dir_ / "b" / "manifest.json"));
}

// Stop 63: a layout the spec's sizes allow but every rank would refuse (ZeRO partitions over
// data-parallel ranks; dp 1 has none) stops the campaign before any run, with the workers' words.
TEST_F(CampaignSpec, ALayoutEveryRankWouldRefuseStopsTheCampaignBeforeAnyRun) {
  std::string text = kSpec;
  text.replace(text.find("{ranks: 4, dp: 2, tp: 2}"), 24, "{ranks: 4, tp: 4, zero: 1, weight: 50}");
  fl::harness::campaign::Options o;
  o.spec = write("spec.yaml", text);
  o.seed = 1;
  o.runs = 6;
  o.out_dir = (dir_ / "out").string();
  try {
    fl::harness::campaign::run_campaign(o);
    ADD_FAILURE() << "no error";
  } catch (const ScenarioError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ZeRO stage 1 partitions across data-parallel ranks, but dp is 1"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("nothing was run"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out" / "runs"));
}

TEST_F(CampaignSpec, ZeroRunsIsAnErrorBeforeAnythingIsWritten) {
  fl::harness::campaign::Options o;
  o.spec = write("spec.yaml", kSpec);
  o.seed = 1;
  o.runs = 0;
  o.out_dir = (dir_ / "out").string();
  try {
    fl::harness::campaign::run_campaign(o);
    ADD_FAILURE() << "no error";
  } catch (const fl::harness::UsageError& e) {
    EXPECT_STREQ(e.what(), "--runs 0: expected 1 or more runs");
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

#else  // campaign_run_test: real runs

namespace {

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

// Three runs, each with one killed rank: every fault fires and manifests, and a generated file
// runs again alone with `faultline run`.
TEST_F(CampaignSpec, ASmallCampaignRunsEveryFileAndRecordsWhichFaultsManifested) {
  const std::string spec = write("spec.yaml", R"Y(name: kills
workload:
  layouts: [{ranks: 2, dp: 2}]
  steps: [6]
faults:
  count: [2]
  mix:
    - name: killed
      fault: {signal: KILL, rank: "{rank}", step: "{step}"}
      expect: {oracle: exit_class, exit_class: signal, ranks: ["{rank}"]}
    - name: too-late
      fault: {plan: "data.fetch[rank={rank},step=1000]=sleep(1)"}
      expect: {symptom: "4.1", oracle: throughput_degradation, slowed: rank}
when: {step: {min: 1, max: 3}}
scenario:
  timeouts: {run_s: 60, comm_ms: 4000}
)Y");
  const auto out = (dir_ / "c").string();
  const auto r = fl::test::run_process(
      {FAULTLINE_CLI, "campaign", spec, "--seed", "3", "--runs", "3", "-o", out, "-q"}, {},
      std::chrono::seconds(600));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("campaign   3 runs in "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faulty     3 runs: reproduced 3 (100%)"), std::string::npos) << r.output;
  const auto truth = jsonl(out + "/ground_truth.jsonl");
  ASSERT_EQ(truth.size(), 3u);
  for (const auto& t : truth) {
    EXPECT_EQ(t["outcome"], "pass") << t.dump();
    ASSERT_EQ(t["faults"].size(), 2u);
    for (const auto& f : t["faults"]) {
      const bool killed = f["template"] == "killed";
      EXPECT_EQ(f["fired"], killed) << f.dump();
      EXPECT_EQ(f["manifested"], killed) << f.dump();
      if (!killed) {
        EXPECT_EQ(f["why"], "never fired");
      }
    }
  }
  const auto summary = nlohmann::json::parse(read(out + "/summary.json"));
  EXPECT_EQ(summary["runs"], 3);
  EXPECT_EQ(summary["faults"], 6);
  EXPECT_EQ(summary["fired"], 3);
  EXPECT_EQ(summary["manifested"], 3);
  const auto alone =
      fl::test::run_process({FAULTLINE_CLI, "run", out + "/scenarios/kills-r0002.yaml", "--results",
                             (dir_ / "alone").string(), "-q"},
                            {}, std::chrono::seconds(120));
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
}

// A run that should complete, with three faults of which only the killed rank breaks it: shrink
// finds that fault in at most 20 runs and reports how many it used.
TEST_F(CampaignSpec, APlantedThreeFaultRunShrinksToTheOneFaultThatMatters) {
  const std::string planted = write("planted.yaml", R"Y(name: planted
topology: {ranks: 4, dp: 4}
workload: {model: tiny, steps: 8}
faults:
  - plan: "data.fetch[rank=0,step=1]=sleep(5)"
  - {signal: KILL, rank: 1, step: 2}
  - plan: "optimizer.step[rank=2,step=1]=sleep(5)"
expect: {oracle: completed}
timeouts: {run_s: 60, comm_ms: 4000}
seed: 5
)Y");
  const auto runs = (dir_ / "runs").string();
  const auto first = fl::test::run_process(
      {FAULTLINE_CLI, "run", planted, "--results", runs, "--run-id", "planted", "-q"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(first.exit_code, 1) << first.output;
  const auto out = (dir_ / "minimal.yaml").string();
  const auto r = fl::test::run_process({FAULTLINE_CLI, "shrink", runs + "/planted", "-o", out,
                                        "--max-runs", "20", "--work", (dir_ / "work").string()},
                                       {}, std::chrono::seconds(900));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("property   expectation_failed: fail: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faults     3 -> 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs       "), std::string::npos) << r.output;
  const auto s = fl::harness::load_scenario(out);
  ASSERT_EQ(s.faults.plans.size() + s.faults.oop.size(), 1u);
  EXPECT_EQ(s.faults.oop.size(), 1u);  // the signal
  const auto runs_line = r.output.substr(r.output.find("runs       ") + 11);
  EXPECT_LE(std::stoi(runs_line), 20) << r.output;
}

#endif
