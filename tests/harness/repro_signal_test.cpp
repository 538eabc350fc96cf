// `faultline repro` and SIGINT: the command ends with the run it interrupted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string results_dir() {
  return test::fresh_test_dir("repro-signal",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// Stop 74: Ctrl-C during `faultline repro` ends the command: the faulty run is interrupted, the
// fix variant never starts, and the exit status is 4 (it used to go on to the fix variant).
TEST(HarnessRun, SigintDuringReproEndsItBeforeTheFixVariant) {
  const auto results = results_dir();
  fs::create_directories(results);
  const std::string scenario = results + "/long.yaml", out = results + "/repro.out";
  std::ofstream(scenario) << R"y(name: long-repro
topology: {ranks: 2}
workload: {steps: 100000}
faults:
  - {signal: STOP, rank: 1, step: 99990}
expect: {symptom: "4.11", oracle: hang, hang_s: 4, ranks: [1]}
fix: {faults: [], expect: {absent: true}}
)y";
  const pid_t harness = ::fork();
  if (harness == 0) {
    ::freopen("/dev/null", "r", stdin);
    ::freopen(out.c_str(), "w", stdout);
    ::execl(FAULTLINE_CLI, FAULTLINE_CLI, "repro", scenario.c_str(), "--results", results.c_str(),
            nullptr);
    ::_exit(127);
  }
  auto run_dirs = [&] {
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(results)) {
      if (e.is_directory()) dirs.push_back(e.path().string());
    }
    return dirs;
  };
  bool stepping = false;
  for (int i = 0; i < 1500 && !stepping; ++i) {
    for (const auto& d : run_dirs()) {
      std::ifstream in(d + "/history.jsonl");
      std::string text((std::istreambuf_iterator<char>(in)), {});
      stepping = stepping || text.find("\"kind\":\"step\"") != std::string::npos;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(stepping);
  ::kill(harness, SIGINT);
  int st = 0;
  ::waitpid(harness, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "repro died of the signal instead of handling it";
  EXPECT_EQ(WEXITSTATUS(st), 4);
  std::ifstream oin(out);
  const std::string printed((std::istreambuf_iterator<char>(oin)), {});
  EXPECT_NE(printed.find("INTERRUPTED"), std::string::npos) << printed;
  EXPECT_NE(printed.find("the fix variant was not run"), std::string::npos) << printed;
  const auto dirs = run_dirs();
  ASSERT_EQ(dirs.size(), 1u) << "the fix variant started: " << printed;
  std::ifstream vin(dirs[0] + "/verdict.json");
  EXPECT_EQ(nlohmann::json::parse(vin)["outcome"], "interrupted");
  fs::remove_all(results);
}

}  // namespace
}  // namespace fl::harness
