// topology.launcher: auto for real: a 24-rank clean CPU MPI scenario that names no launcher runs
// under mpirun, passes, and its history and header say which launcher was chosen and why. And
// mpirun's app file carries what an env fault sets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

TEST(LauncherChoiceRun, LargeCleanWorldWithoutALauncherKeyRunsUnderMpirunAndPasses) {
  const std::string dir = test::fresh_test_dir("launcher-choice", "auto24");
  const std::string file = dir + "/wide.yaml";
  std::ofstream(file) << "name: wide-clean\n"
                         "description: 24 ranks, no launcher named, every rank must finish.\n"
                         "topology: {ranks: 24, dp: 12, tp: 2, backend: mpi}\n"
                         "workload: {model: tiny, steps: 2, precision: fp32}\n"
                         "expect: {oracle: completed}\n"
                         "timeouts: {run_s: 280, rendezvous_ms: 240000}\n"
                         "seed: 7\n";
  const auto r =
      test::run_process({FAULTLINE_CLI, "run", file, "--results", dir, "--run-id", "auto24"},
                        {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}},
                        std::chrono::seconds(300));
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launcher   mpirun, chosen: 24 ranks > 8"), std::string::npos)
      << r.output;
  std::ifstream vin(dir + "/auto24/verdict.json");
  ASSERT_TRUE(vin) << r.output;
  EXPECT_EQ(nlohmann::json::parse(vin).value("outcome", ""), "pass") << r.output;

  int choices = 0, mpirun_launches = 0;
  std::ifstream hin(dir + "/auto24/history.jsonl");
  for (std::string line; std::getline(hin, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("source", "") != "harness") continue;
    const auto& d = e["data"];
    if (e.value("kind", "") == "launcher_choice") {
      ++choices;
      EXPECT_EQ(d.value("launcher", ""), "mpirun") << line;
      EXPECT_NE(d.value("reason", "").find("24 ranks > 8"), std::string::npos) << line;
    } else if (e.value("kind", "") == "launch" && d.value("launcher", "") == "mpirun") {
      ++mpirun_launches;
    } else if (e.value("kind", "") == "run_start") {
      EXPECT_EQ(d.value("launcher", ""), "mpirun") << line;
    }
  }
  EXPECT_EQ(choices, 1);
  EXPECT_EQ(mpirun_launches, 24);
  fs::remove_all(dir);
}

// An env fault's variable that neither the scenario nor the rank's identity names (CXX) must reach
// the ranks mpirun starts: before, the app file left it to mpirun's environment, which lacks it.
TEST(LauncherChoiceRun, AnEnvFaultsVariableReachesTheRanksUnderMpirun) {
  const std::string dir = test::fresh_test_dir("launcher-choice", "mpirun-env");
  const std::string file =
      std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/symptoms/1.1-jit-build-no-compiler.yaml";
  const auto r =
      test::run_process({FAULTLINE_CLI, "run", file, "--results", dir, "--run-id", "cxx", "--set",
                         "topology.launcher=mpirun"},
                        {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}},
                        std::chrono::seconds(150));
  ASSERT_FALSE(r.timed_out) << r.output;
  std::ifstream vin(dir + "/cxx/verdict.json");
  ASSERT_TRUE(vin) << r.output;
  EXPECT_EQ(nlohmann::json::parse(vin).value("outcome", ""), "pass") << r.output;
  std::ifstream app(dir + "/cxx/appfile");
  const std::string lines((std::istreambuf_iterator<char>(app)), std::istreambuf_iterator<char>());
  EXPECT_NE(lines.find(" -x CXX=g++-12-missing"), std::string::npos) << lines;
  fs::remove_all(dir);
}

// The artifact hub's URL (http://...) is every rank's: in the app file Open MPI would read its
// "//" as a comment and find no executable; mpirun's environment carries it.
TEST(LauncherChoiceRun, AFetchingWorkloadRunsUnderMpirun) {
  const std::string dir = test::fresh_test_dir("launcher-choice", "mpirun-fetch");
  const std::string file = std::string(FAULTLINE_SOURCE_DIR) +
                           "/scenarios/symptoms/1.3-artifact-mirror-unreachable.yaml";
  const auto r =
      test::run_process({FAULTLINE_CLI, "run", file, "--fix", "--results", dir, "--run-id", "fetch",
                         "--set", "topology.launcher=mpirun"},
                        {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}},
                        std::chrono::seconds(150));
  ASSERT_FALSE(r.timed_out) << r.output;
  std::ifstream vin(dir + "/fetch/verdict.json");
  ASSERT_TRUE(vin) << r.output;
  EXPECT_EQ(nlohmann::json::parse(vin).value("outcome", ""), "pass") << r.output;
  std::ifstream app(dir + "/fetch/appfile");
  const std::string lines((std::istreambuf_iterator<char>(app)), std::istreambuf_iterator<char>());
  EXPECT_EQ(lines.find("//"), std::string::npos) << lines;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
