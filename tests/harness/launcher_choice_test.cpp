// topology.launcher: auto (the default; harness/scenario/launcher_choice.cpp): a large clean CPU
// MPI world gets mpirun, a small one keeps the local launcher, a large one that needs the local
// launcher's own rank processes keeps it and says why, and a named launcher is honoured as named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/model/scenario.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

class LauncherChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fl::test::fresh_test_dir(
        "launcher-choice", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Scenario load(const std::string& text) {
    const auto p = (dir_ / "s.yaml").string();
    std::ofstream(p) << text;
    return load_scenario(p);
  }
  std::filesystem::path dir_;
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(LauncherChoice, LargeCleanCpuWorldGetsMpirun) {
  const auto s = load("name: a\ntopology: {ranks: 32}\nworkload: {steps: 2}\n");
  EXPECT_EQ(s.topo.launcher, "mpirun");
  EXPECT_TRUE(has(s.topo.launcher_reason, "32 ranks > 8")) << s.topo.launcher_reason;
  EXPECT_TRUE(has(s.topo.launcher_reason, "nothing needs separate rank processes"))
      << s.topo.launcher_reason;
  // The first size above the threshold, and `auto` written out means the same.
  EXPECT_EQ(load("name: a\ntopology: {ranks: 9}\n").topo.launcher, "mpirun");
  const auto named_auto = load("name: a\ntopology: {ranks: 32, launcher: auto}\n");
  EXPECT_EQ(named_auto.topo.launcher, "mpirun");
  EXPECT_EQ(named_auto.topo.launcher_reason, s.topo.launcher_reason);
}

TEST_F(LauncherChoice, SmallWorldKeepsTheLocalLauncher) {
  for (const int n : {1, 4, 8}) {
    const auto s = load("name: a\ntopology: {ranks: " + std::to_string(n) + "}\n");
    EXPECT_EQ(s.topo.launcher, "local") << n;
    EXPECT_TRUE(has(s.topo.launcher_reason, std::to_string(n) + " ranks <= 8"))
        << s.topo.launcher_reason;
  }
}

TEST_F(LauncherChoice, LargeWorldThatNeedsRankProcessesKeepsLocalAndSaysWhy) {
  // A fault the mpirun validation refuses: its own message is the reason.
  auto s = load(
      "name: a\ntopology: {ranks: 32, nodes: 2}\n"
      "faults:\n  - network: {action: reject, node: 1, store: true}\n    at: launch\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "32 ranks > 8, but faults[0]")) << s.topo.launcher_reason;
  EXPECT_TRUE(has(s.topo.launcher_reason, "need topology.launcher: local"))
      << s.topo.launcher_reason;
  // A signal to one rank: mpirun would accept it, but the rank's end would end the job.
  s = load("name: a\ntopology: {ranks: 16}\nfaults:\n  - {signal: KILL, rank: 3, step: 2}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "faults[0] (signal)")) << s.topo.launcher_reason;
  // A resharding restart (recovery shrink) and a recovery tool of the scenario's own.
  s = load("name: a\ntopology: {ranks: 16}\nrecovery: shrink\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "recovery shrink")) << s.topo.launcher_reason;
  s = load("name: a\ntopology: {ranks: 16}\nrecovery: my-tool --fast\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "restart_rank")) << s.topo.launcher_reason;
  // A policy that only restarts the whole job works under mpirun.
  EXPECT_EQ(load("name: a\ntopology: {ranks: 16}\nrecovery: restart\n").topo.launcher, "mpirun");
  // Network namespaces, and a value mpirun's app file cannot carry.
  s = load("name: a\ntopology: {ranks: 16, network: namespaces}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "namespaces")) << s.topo.launcher_reason;
  s = load("name: a\ntopology: {ranks: 16}\nenv: {GREETING: \"hello world\"}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "env.GREETING")) << s.topo.launcher_reason;
  // '#' and '//' end an app-file line: one rank's such value keeps the local launcher; every
  // rank's goes in mpirun's environment. An argument with them is every rank's line.
  s = load("name: a\ntopology: {ranks: 16}\nrank_env:\n  3: {HUB: \"http://h\"}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "rank_env.3.HUB has '#' or '//'"))
      << s.topo.launcher_reason;
  EXPECT_EQ(load("name: a\ntopology: {ranks: 16}\nenv: {HUB: \"http://h\"}\n").topo.launcher,
            "mpirun");
  s = load("name: a\ntopology: {ranks: 16}\nworkload: {args: [\"--tag\", \"a#b\"]}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "workload.args[1]")) << s.topo.launcher_reason;
  // In-process plans act inside the ranks: either launcher carries them.
  EXPECT_EQ(load("name: a\ntopology: {ranks: 16}\nfaults:\n  - plan: "
                 "\"data.fetch[rank=3,step=8-100]=delay(150)\"\n")
                .topo.launcher,
            "mpirun");
}

TEST_F(LauncherChoice, NotACpuMpiWorldKeepsTheLocalLauncher) {
  auto s = load("name: a\ntopology: {ranks: 16, backend: nccl}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_TRUE(has(s.topo.launcher_reason, "backend nccl")) << s.topo.launcher_reason;
  s = load("name: a\ntopology: {ranks: 16}\nworkload: {kind: command, command: [/bin/true]}\n");
  EXPECT_NE(s.topo.launcher, "mpirun");
  EXPECT_TRUE(has(s.topo.launcher_reason, "command")) << s.topo.launcher_reason;
}

// The baseline's reference run drops the faults that kept the run local; it still runs under the
// run's launcher, so the two are compared like for like.
TEST_F(LauncherChoice, TheReferenceRunKeepsTheRunsLauncher) {
  const auto s = load(
      "name: a\ntopology: {ranks: 16}\nfaults:\n  - {signal: STOP, rank: 2, step: 3}\n"
      "expect: {symptom: \"4.1\", oracle: baseline, measure: throughput, factor: 2.5}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  ASSERT_FALSE(s.side_runs.baseline_yaml.empty());
  const auto ref = YAML::Load(s.side_runs.baseline_yaml);
  EXPECT_EQ(ref["topology"]["launcher"].as<std::string>(""), "local") << s.side_runs.baseline_yaml;
  EXPECT_FALSE(ref["faults"]) << s.side_runs.baseline_yaml;
}

// `--recovery` is given beside the scenario: a tool that needs rank processes takes a chosen
// mpirun back to local; a named launcher and a tool that restarts the whole job change nothing.
TEST_F(LauncherChoice, ARecoveryToolGivenAtRunTimeIsHeard) {
  const auto big = load("name: a\ntopology: {ranks: 16}\n");
  ASSERT_EQ(big.topo.launcher, "mpirun");
  const auto shrunk = with_recovery_launcher(big, "shrink");
  EXPECT_EQ(shrunk.topo.launcher, "local");
  EXPECT_TRUE(has(shrunk.topo.launcher_reason, "16 ranks > 8, but --recovery shrink"))
      << shrunk.topo.launcher_reason;
  EXPECT_EQ(with_recovery_launcher(big, "restart").topo.launcher, "mpirun");
  EXPECT_EQ(with_recovery_launcher(big, "").topo.launcher, "mpirun");
  const auto named = load("name: a\ntopology: {ranks: 16, launcher: mpirun}\n");
  EXPECT_EQ(with_recovery_launcher(named, "shrink").topo.launcher, "mpirun");
}

TEST_F(LauncherChoice, ANamedLauncherIsHonoured) {
  auto s = load("name: a\ntopology: {ranks: 32, launcher: local}\n");
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_EQ(s.topo.launcher_reason, "");
  s = load("name: a\ntopology: {ranks: 4, launcher: mpirun}\n");
  EXPECT_EQ(s.topo.launcher, "mpirun");
  EXPECT_EQ(s.topo.launcher_reason, "");
  // A named mpirun is still refused what needs rank processes (not silently switched).
  EXPECT_THROW(load("name: a\ntopology: {ranks: 32, launcher: mpirun, network: namespaces}\n"),
               ScenarioError);
}

}  // namespace
}  // namespace fl::harness
