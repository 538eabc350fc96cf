// What `faultline run` prints with real ranks: the header at once, the notable events as they
// happen, a summary whose words match the verdict (a fix variant "absent; all N ranks
// finished"), what attached detectors concluded, -q for the summary alone; and three suites
// started in the same second into one results directory, each in a directory of its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace {

namespace fs = std::filesystem;
const std::string kSource = FAULTLINE_SOURCE_DIR;
const std::string kCli = FAULTLINE_CLI;

std::string test_dir() {
  return fl::test::fresh_test_dir("runout",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

void write_tiny(const std::string& file, const std::string& name) {
  std::ofstream(file) << "name: " << name
                      << "\ntopology: {ranks: 2}\nworkload: {steps: 3}\n"
                         "expect: {oracle: completed}\n";
}

size_t at(const std::string& out, const std::string& what) {
  const size_t p = out.find(what);
  EXPECT_NE(p, std::string::npos) << "'" << what << "' missing in\n" << out;
  return p;
}

TEST(RunOutput, HeaderFirstThenEventsThenTheSummary) {
  const auto dir = test_dir();
  write_tiny(dir + "/tiny.yaml", "tiny");
  auto r = fl::test::run_process({kCli, "run", dir + "/tiny.yaml", "--results", dir + "/runs"}, {},
                                 std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("faultline run ", 0), 0u) << r.output;
  const size_t layout = at(r.output, "\n  layout     2 ranks = dp 2 x tp 1 x pp 1");
  // A unix socket: in the run directory, or through a short link to it when that path is too
  // long for one (ARunDirectoryTooLongForASocket... below).
  const size_t control = at(r.output, "\n  control    ");
  const std::string addr = r.output.substr(control + 14, 6);
  EXPECT_EQ(addr, "unix:/") << r.output;
  const size_t exit0 = at(r.output, "rank 0     exited cleanly\n");
  const size_t exit1 = at(r.output, "rank 1     exited cleanly\n");
  const size_t steps = at(r.output, "\n  steps      3 of 3\n");
  const size_t verdict = at(r.output, "\n  verdict    pass (oracle completed)\n");
  EXPECT_LT(layout, control);
  EXPECT_LT(control, std::min(exit0, exit1));
  EXPECT_LT(std::max(exit0, exit1), steps);
  EXPECT_LT(steps, verdict);
  // Event lines carry the time since the start.
  EXPECT_NE(r.output.find("  +"), std::string::npos);

  auto q =
      fl::test::run_process({kCli, "run", dir + "/tiny.yaml", "--results", dir + "/runs", "-q"}, {},
                            std::chrono::seconds(120));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(q.output.find("  control "), std::string::npos) << q.output;
  EXPECT_EQ(q.output.find("exited cleanly"), std::string::npos) << q.output;
  at(q.output, "\n  scenario   tiny (");
  at(q.output, "\n  verdict    pass (oracle completed)\n");
}

// A results folder deep enough that RUN_DIR/control.sock passes the 107 bytes of a unix socket's
// path: the socket is bound through /tmp/faultline-control-XXXXXX/run, a private link to the run
// directory, so it still lands there beside control.secret; the link's directory is gone once the
// run ends. Ranks in network namespaces reach it too: such runs (a triage draft from a two-node
// base under results/runs) used to be refused, and host runs fell back to loopback TCP.
TEST(RunOutput, ARunDirectoryTooLongForASocketIsReachedThroughAShortPrivateLink) {
  const auto dir = test_dir();
  const std::string results = dir + "/" + std::string(90, 'r');
  write_tiny(dir + "/tiny.yaml", "tiny");
  std::vector<std::string> networks = {"host"};
  if (::geteuid() == 0) networks.push_back("namespaces");  // network namespaces need root
  for (const auto& network : networks) {
    const std::string id = "long-" + network;
    auto r = fl::test::run_process(
        {kCli, "run", dir + "/tiny.yaml", "--results", results, "--run-id", id, "--set",
         "topology.nodes=2", "--set", "topology.network=" + network},
        {}, std::chrono::seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_GT((results + "/" + id + "/control.sock").size(), 107u);
    const size_t control = at(r.output, "\n  control    unix:/tmp/faultline-control-");
    const std::string addr =
        r.output.substr(control + 14, r.output.find('\n', control + 1) - control - 14);
    EXPECT_LE(addr.size() - 5, 107u) << addr;
    EXPECT_EQ(addr.substr(addr.size() - 17), "/run/control.sock") << addr;
    // Every rank's events arrived live through it: none was merged late from the rank's file.
    at(r.output, "rank 0     exited cleanly\n");
    at(r.output, "rank 1     exited cleanly\n");
    std::ifstream hist(results + "/" + id + "/history.jsonl");
    size_t live = 0;
    for (std::string line; std::getline(hist, line);) {
      const auto e = nlohmann::json::parse(line);
      if (e.value("source", "") != "rank") continue;
      EXPECT_FALSE(e.value("late", false)) << line;
      ++live;
    }
    EXPECT_GT(live, 0u) << network;
    EXPECT_TRUE(fs::exists(results + "/" + id + "/control.secret"));
    const std::string link_dir = addr.substr(5, addr.size() - 5 - 17);
    EXPECT_FALSE(fs::exists(fs::symlink_status(link_dir))) << link_dir << " outlived its run";
  }
  fs::remove_all(dir);
}

TEST(RunOutput, FaultyAndFixVariantsSayWhatHappenedInWords) {
  const auto dir = test_dir();
  const std::string sc = kSource + "/scenarios/symptoms/2.1-world-size-mismatch.yaml";
  auto faulty =
      fl::test::run_process({kCli, "run", sc, "--results", dir + "/runs", "--detector", "logs"}, {},
                            std::chrono::seconds(120));
  ASSERT_EQ(faulty.exit_code, 0) << faulty.output;
  at(faulty.output, "first error (");
  at(faulty.output, "\n  verdict    pass: symptom 2.1 reproduced (oracle error_signature)\n");
  const size_t det = at(faulty.output, "\n  detectors  ");
  EXPECT_NE(faulty.output.find("logs", det), std::string::npos) << faulty.output;

  auto fixed = fl::test::run_process({kCli, "run", sc, "--fix", "--results", dir + "/runs"}, {},
                                     std::chrono::seconds(120));
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  at(fixed.output, "\n  steps      4 of 4\n");
  at(fixed.output,
     "\n  verdict    pass: symptom 2.1 absent; all 4 ranks finished (oracle error_signature, "
     "fix variant)\n");
  EXPECT_EQ(fixed.output.find("stopped"), std::string::npos) << fixed.output;
}

TEST(RunOutput, StepsCountWhatTheRanksPlannedWithEpochs) {
  // With --epochs the steps come from the data (16 samples over dp 2, micro-batch 4: two steps
  // each), not from workload.steps: the ranks' layout events say how many they will run.
  const auto dir = test_dir();
  std::ofstream(dir + "/epochs.yaml")
      << "name: epochs\ntopology: {ranks: 2, dp: 2}\n"
         "workload: {steps: 20, micro_batch: 4, data: {samples: 16}, args: [--epochs, \"1\"]}\n"
         "expect: {oracle: completed}\n";
  auto r = fl::test::run_process({kCli, "run", dir + "/epochs.yaml", "--results", dir + "/runs"},
                                 {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  at(r.output, "\n  steps      2 of 2\n");
}

TEST(SuiteDirectories, ThreeSuitesStartedInTheSameSecondDoNotShareADirectory) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/s");
  write_tiny(dir + "/s/tiny.yaml", "tiny");
  std::vector<std::future<fl::test::ProcessResult>> suites;
  for (int i = 0; i < 3; ++i) {
    suites.push_back(std::async(std::launch::async, [&] {
      return fl::test::run_process(
          {kCli, "suite", dir + "/s", "-j", "1", "--results", dir + "/out"},
          {{"FAULTLINE_SUITE_STAMP", "20260101-000000"}}, std::chrono::seconds(180));
    }));
  }
  for (auto& f : suites) {
    auto r = f.get();
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  std::set<std::string> names, run_dirs;
  for (auto& e : fs::directory_iterator(dir + "/out")) {
    names.insert(e.path().filename().string());
    std::ifstream in(e.path() / "summary.json");
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["dir"], e.path().string());
    ASSERT_EQ(j["cases"].size(), 1u);
    EXPECT_EQ(j["cases"][0]["outcome"], "pass");
    run_dirs.insert(j["cases"][0]["run_dir"].get<std::string>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"20260101-000000-s", "20260101-000000-s-2",
                                          "20260101-000000-s-3"}));
  EXPECT_EQ(run_dirs.size(), 3u);
}

}  // namespace
