// The dataset (faultline export) and the offline replay (faultline score --offline): hashes with
// known values, the exported layout and its manifest, an export never overwriting, a reader
// refusing a schema it does not know, a recorded history fed to a real detector over the control
// plane at 20x, and the sweep curve of the HTML report.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/tools.hpp"
#include "harness/report/report.hpp"
#include "harness/score/dataset.hpp"
#include "harness/score/offline.hpp"
#include "harness/score/sha256.hpp"
#include "tests/support/fake_run.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
using test::FakeRun;

const char* const kPositive = test::kPositiveScenario;
const char* const kClean = test::kCleanScenario;

std::string root() {
  return test::fresh_test_dir("dataset",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A positive: rank 1 prints a comm timeout at 3 s after two steps; the fault fired at 2.5 s; the
// live logs detector diagnosed it at 3.01 s. And a clean run of 2 s with no alarm.
void write_runs(const std::string& dir) {
  {
    FakeRun p(dir + "/runs", "a", kPositive);
    p.ev(0, "harness", -1, "run_start", {{"ranks", 2}, {"expect", {{"symptom", "4.7"}}}});
    p.ev(0.1, "harness", -1, "tool_start", {{"tool", "logs"}, {"recovery", false}});
    p.launch(0.5, 2);
    for (int r = 0; r < 2; ++r) p.ev(1.0, "rank", r, "step", {{"loss", 2.0}}, 0);
    p.ev(2.5, "rank", 1, "fault_fired", {{"site", "comm.all_reduce"}});
    p.ev(3.0, "harness", 1, "output", {{"line", "worker error (comm timeout): all_reduce"}});
    p.diag(3.01, "logs", "4.7", {1});
    p.ev(3.5, "harness", -1, "run_ending", {{"tools", 1}, {"wait_s", 3}});
    p.ev(3.6, "harness", -1, "run_end", {{"outcome", "pass"}});
    fs::create_directories(p.dir + "/ranks/rank1");
    std::ofstream(p.dir + "/ranks/rank1/events.jsonl") << "{\"kind\":\"hello\"}\n";
    std::ofstream(p.dir + "/ranks/rank1/fr_dump_on_signal") << "flight recorder bytes";
    std::ofstream(p.dir + "/control.secret") << "never exported";
  }
  FakeRun c(dir + "/runs", "b", kClean);
  c.ev(0, "harness", -1, "run_start", {{"ranks", 2}});
  c.launch(0.2, 2);
  for (int r = 0; r < 2; ++r) {
    c.ev(2, "harness", r, "rank_exit", {{"class", "ok"}, {"code", 0}, {"by_harness", false}});
  }
  c.ev(2, "harness", -1, "run_end", {});
}

TEST(Dataset, Sha256GivesTheStandardDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Dataset, ExportWritesRunsGroundTruthAndAManifestOfHashes) {
  const auto dir = root();
  write_runs(dir + "/suite");
  const std::string out = dir + "/ds";
  EXPECT_EQ(export_dataset({{dir + "/suite"}, out}), 2);
  const auto m = nlohmann::json::parse(slurp(out + "/manifest.json"));
  EXPECT_EQ(m["schema"], "faultline.dataset");
  EXPECT_EQ(m["schema_version"], 1);
  EXPECT_EQ(m["runs"], 2);
  std::set<std::string> paths;
  for (const auto& f : m["files"]) {
    const std::string p = f["path"];
    paths.insert(p);
    EXPECT_EQ(f["sha256"], sha256_file_hex(out + "/" + p)) << p;
    EXPECT_EQ(f["bytes"], fs::file_size(out + "/" + p)) << p;
  }
  EXPECT_TRUE(paths.count("runs/a/history.jsonl"));
  EXPECT_TRUE(paths.count("runs/a/ranks/rank1/events.jsonl"));
  EXPECT_TRUE(paths.count("runs/a/ranks/rank1/fr_dump_on_signal"));
  EXPECT_TRUE(paths.count("runs/a/ground_truth.json"));
  EXPECT_TRUE(paths.count("runs.jsonl"));
  EXPECT_FALSE(fs::exists(out + "/runs/a/control.secret"));
  EXPECT_EQ(slurp(out + "/runs/a/history.jsonl"), slurp(dir + "/suite/runs/a/history.jsonl"));
  const auto gt = nlohmann::json::parse(slurp(out + "/runs/a/ground_truth.json"));
  EXPECT_EQ(gt["class"], "positive");
  EXPECT_EQ(gt["symptom"], "4.7");
  EXPECT_DOUBLE_EQ(gt["injected_s"].get<double>(), 2.5);
  ASSERT_EQ(gt["faults"].size(), 1u);
  EXPECT_EQ(gt["faults"][0]["kind"], "fault_fired");
  EXPECT_EQ(gt["faults"][0]["rank"], 1);
  std::ifstream lines(out + "/runs.jsonl");
  std::string first;
  std::getline(lines, first);
  const auto line = nlohmann::json::parse(first);
  EXPECT_EQ(line["id"], "a");
  EXPECT_EQ(line["class"], "positive");
  EXPECT_EQ(dataset_runs(out), (std::vector<std::string>{out + "/runs/a", out + "/runs/b"}));
  try {
    export_dataset({{dir + "/suite"}, out});
    FAIL() << "an export overwrote " << out;
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "export: " + out +
                  " exists; an export writes a new directory and never overwrites one (remove it "
                  "or choose another -o)");
  }
}

TEST(Dataset, AReaderRefusesASchemaVersionItDoesNotKnow) {
  const auto dir = root();
  std::ofstream(dir + "/manifest.json")
      << R"({"schema": "faultline.dataset", "schema_version": 2})";
  try {
    dataset_runs(dir);
    FAIL() << "read a version 2 dataset";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir + "/manifest.json: schema_version 2 is not one this build reads (1 to 1)");
  }
}

TEST(Offline, ARecordedHistoryIsFedToARealDetectorAndScoresAsLive) {
  const auto dir = root();
  write_runs(dir + "/suite");
  const auto tools = resolve_tools({"logs"}, "");
  const ReplayStats st = replay_run(dir + "/suite/runs/a", dir + "/replay-a", tools, 20);
  EXPECT_TRUE(st.tools_listened);
  EXPECT_DOUBLE_EQ(st.recorded_s, 3.6);
  // Every recorded event but the live tool's traces, at its recorded time; the replayed tool's
  // own start, its diagnosis and its exit.
  const auto h = read_history(dir + "/replay-a/history.jsonl");
  std::vector<std::string> kinds;
  const HistoryEvent* diag = nullptr;
  for (const auto& e : h) {
    kinds.push_back(e.kind);
    if (e.kind == "output") EXPECT_EQ(e.t_ns, 3'000'000'000);
    if (e.kind == "diagnosis") diag = &e;
  }
  ASSERT_NE(diag, nullptr);
  EXPECT_GE(diag->t_ns, 3'000'000'000);  // after the line it diagnoses
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "diagnosis"), 1);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "tool_start"), 1);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "fault_fired"), 1);
  const RunTruth live = load_run_truth(dir + "/suite/runs/a");
  const RunTruth replay = load_run_truth(dir + "/replay-a");
  auto a = scoring_record(live, "logs"), b = scoring_record(replay, "logs");
  EXPECT_EQ(a["detected"], true);
  a.erase("latency_s");
  b.erase("latency_s");
  EXPECT_EQ(a, b);
  // The control plane of a replay acts on nothing.
  EXPECT_NE(slurp(dir + "/replay-a/tools/logs.log").find("logs: 1 diagnosis(es) posted"),
            std::string::npos);
}

TEST(Report, SweepCurveHasOnePointPerKnobValueInKnobOrder) {
  nlohmann::json lb = {{"detectors", nlohmann::json::array()}};
  auto det = [&](const std::string& name, int tp, int fa) {
    lb["detectors"].push_back({{"detector", name},
                               {"true_positives", tp},
                               {"positives", 10},
                               {"false_alarm_clean_runs", fa},
                               {"negatives", 4}});
  };
  det("hang", 5, 0);  // not a variant: no point
  det("hang,floor-s=16", 2, 0);
  det("hang,floor-s=2", 8, 3);
  det("hang,floor-s=5", 5, 0);
  const std::string svg = sweep_curves_html(lb);
  EXPECT_NE(svg.find("data-curve=\"hang --floor-s\""), std::string::npos) << svg;
  const auto p2 = svg.find("data-value=\"2\" data-recall=\"8/10\" data-false-alarm=\"3/4\"");
  const auto p5 = svg.find("data-value=\"5\" data-recall=\"5/10\" data-false-alarm=\"0/4\"");
  const auto p16 = svg.find("data-value=\"16\" data-recall=\"2/10\"");
  ASSERT_NE(p2, std::string::npos) << svg;
  ASSERT_NE(p5, std::string::npos) << svg;
  ASSERT_NE(p16, std::string::npos) << svg;
  EXPECT_LT(p2, p5);
  EXPECT_LT(p5, p16);
  // x = 3/4 false alarms: 44 + 0.75 * 332 = 293; y = 80% recall: 320 - 44 - 0.8 * 232 = 90.4.
  EXPECT_NE(svg.find("<circle cx=\"293.0\" cy=\"90.4\""), std::string::npos) << svg;
  EXPECT_EQ(sweep_curves_html({{"detectors", {{{"detector", "hang,floor-s=2"}}}}}), "");
}

}  // namespace
}  // namespace fl::harness
