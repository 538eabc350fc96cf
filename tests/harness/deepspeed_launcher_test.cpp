// launcher: deepspeed for real: fl-ds-runner starts the slots a hostfile and --exclude choose,
// each rank with launch.py's RANK / LOCAL_RANK / CUDA_VISIBLE_DEVICES, and the runner's and the
// ranks' own errors reach the run's output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

struct Ran {
  test::ProcessResult r;
  std::string dir;
};

Ran run_scenario(const std::string& id, const std::string& yaml) {
  const std::string dir = test::fresh_test_dir("deepspeed-launcher", id);
  const std::string file = dir + "/s.yaml";
  std::ofstream(file) << yaml;
  auto r =
      test::run_process({FAULTLINE_CLI, "run", file, "--results", dir, "--run-id", id},
                        {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}},
                        std::chrono::seconds(150));
  return {r, dir + "/" + id};
}

std::string verdict(const std::string& run_dir) {
  std::ifstream in(run_dir + "/verdict.json");
  return in ? nlohmann::json::parse(in).value("outcome", "") : "";
}

// The harness events of one kind, in order.
std::vector<nlohmann::json> harness_events(const std::string& run_dir, const std::string& kind,
                                           const std::string& source = "harness") {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/history.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("source", "") == source && e.value("kind", "") == kind) out.push_back(e);
  }
  return out;
}

TEST(DeepspeedLauncher, HostfileWithExcludeStartsTheChosenSlotsWithLaunchPysRanks) {
  const auto ran = run_scenario(
      "ok",
      "name: ds-ok\n"
      "description: two hosts of two slots, slot 0 of worker-1 excluded, three ranks.\n"
      "topology:\n"
      "  launcher: deepspeed\n"
      "  deepspeed:\n"
      "    hostfile: |\n"
      "      worker-0 slots=2\n"
      "      worker-1 slots=2\n"
      "    exclude: 'worker-1:0'\n"
      "workload: {model: tiny, steps: 2, precision: fp32}\n"
      "expect: {oracle: completed}\n"
      "timeouts: {run_s: 120, rendezvous_ms: 60000}\n"
      "seed: 7\n");
  ASSERT_FALSE(ran.r.timed_out) << ran.r.output;
  EXPECT_EQ(ran.r.exit_code, 0) << ran.r.output;
  EXPECT_EQ(verdict(ran.dir), "pass") << ran.r.output;
  const auto launches = harness_events(ran.dir, "launch");
  ASSERT_EQ(launches.size(), 3u) << ran.r.output;
  for (const auto& e : launches) EXPECT_EQ(e["data"].value("launcher", ""), "deepspeed");
  // Rank 2 is worker-1's only process (slot 1): LOCAL_RANK = 2 % 1 = 0.
  std::map<int, int> local;
  for (const auto& e : harness_events(ran.dir, "hello", "rank")) {
    local[e.value("rank", -1)] = e["data"].value("local_rank", -1);
  }
  EXPECT_EQ(local, (std::map<int, int>{{0, 0}, {1, 1}, {2, 0}})) << ran.r.output;
  std::ifstream ranks(ran.dir + "/ds_ranks.jsonl");
  std::string all((std::istreambuf_iterator<char>(ranks)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.find("FAULTLINE_CONTROL_SECRET"), std::string::npos);  // never in the file
  fs::remove_all(fs::path(ran.dir).parent_path());
}

// Since 0.15.2 an included slot is not checked against the hostfile: CUDA_VISIBLE_DEVICES=5 on a
// node of two devices, and the rank fails as the CUDA runtime would fail it.
TEST(DeepspeedLauncher, AnIncludedSlotTheNodeLacksFailsTheRankWithInvalidDeviceOrdinal) {
  const auto ran =
      run_scenario("ordinal",
                   "name: ds-ordinal\n"
                   "description: slot 5 of a two-slot host.\n"
                   "topology:\n"
                   "  launcher: deepspeed\n"
                   "  deepspeed: {hostfile: \"worker-0 slots=2\\n\", include: 'worker-0:5'}\n"
                   "workload: {model: tiny, steps: 2, precision: fp32}\n"
                   "expect: {oracle: error_signature, pattern: \"invalid device ordinal: "
                   "LOCAL_RANK 0 selects device 0, but 0 device\\\\(s\\\\) are visible on node 0 "
                   "\\\\(CUDA_VISIBLE_DEVICES='5', 2 on the node\\\\)\"}\n"
                   "timeouts: {run_s: 120, rendezvous_ms: 60000}\n"
                   "seed: 7\n");
  ASSERT_FALSE(ran.r.timed_out) << ran.r.output;
  EXPECT_EQ(verdict(ran.dir), "pass") << ran.r.output;
  fs::remove_all(fs::path(ran.dir).parent_path());
}

TEST(DeepspeedLauncher, ABadHostfileLineEndsTheRunWithTheRunnersErrorBeforeAnyRank) {
  const auto ran =
      run_scenario("badline",
                   "name: ds-badline\n"
                   "description: a hostfile line without slots.\n"
                   "topology:\n"
                   "  launcher: deepspeed\n"
                   "  deepspeed: {hostfile: \"worker-0 slots=1\\nworker-1 lots=1\\n\"}\n"
                   "workload: {model: tiny, steps: 2, precision: fp32}\n"
                   "expect: {oracle: error_signature, pattern: \"ValueError: Hostfile contains a "
                   "bad entry: worker-1 lots=1, unable to proceed with launching\"}\n"
                   "timeouts: {run_s: 60, rendezvous_ms: 20000}\n"
                   "seed: 7\n");
  ASSERT_FALSE(ran.r.timed_out) << ran.r.output;
  EXPECT_EQ(verdict(ran.dir), "pass") << ran.r.output;
  EXPECT_TRUE(harness_events(ran.dir, "hello", "rank").empty()) << ran.r.output;
  fs::remove_all(fs::path(ran.dir).parent_path());
}

// An `args` fault for every rank is the runner's user arguments: every rank runs with them (before,
// they were recorded but the runner started the ranks with the plain command).
TEST(DeepspeedLauncher, EveryRanksArgsFaultReachesTheRanksThroughTheRunner) {
  const auto ran =
      run_scenario("args",
                   "name: ds-args\n"
                   "description: tp 4 asked for on the launch line of a world of 2.\n"
                   "topology: {ranks: 2, dp: 2, launcher: deepspeed}\n"
                   "workload: {model: tiny, steps: 2, precision: fp32}\n"
                   "faults:\n"
                   "  - args: [\"--tp\", \"4\", \"--dp\", \"1\"]\n"
                   "expect: {oracle: error_signature, pattern: \"model-parallel size \\\\(tp 4 x "
                   "pp 1\\\\) is larger than the world size 2\"}\n"
                   "timeouts: {run_s: 120, rendezvous_ms: 60000}\n"
                   "seed: 7\n");
  ASSERT_FALSE(ran.r.timed_out) << ran.r.output;
  EXPECT_EQ(verdict(ran.dir), "pass") << ran.r.output;
  const auto launches = harness_events(ran.dir, "launch");
  ASSERT_FALSE(launches.empty()) << ran.r.output;
  const auto argv = launches[0]["data"]["argv"].get<std::vector<std::string>>();
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(argv.end() - 4, argv.end()),
            (std::vector<std::string>{"--tp", "4", "--dp", "1"}));
  fs::remove_all(fs::path(ran.dir).parent_path());
}

// The catalogue's DeepSpeed-runner scenarios: each shows its symptom as written and clears with
// --fix.
class DeepspeedScenarios : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepspeedScenarios, ReproduceAsWrittenAndClearWithTheFix) {
  const std::string file =
      std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/issues/" + GetParam() + ".yaml";
  const std::string dir = test::fresh_test_dir("deepspeed-scenarios", GetParam());
  for (const bool fix : {false, true}) {
    const std::string id = fix ? "fix" : "as-written";
    std::vector<std::string> argv = {FAULTLINE_CLI, "run", file, "--results", dir, "--run-id", id};
    if (fix) argv.push_back("--fix");
    const auto r = test::run_process(
        argv, {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}},
        std::chrono::seconds(150));
    ASSERT_FALSE(r.timed_out) << r.output;
    EXPECT_EQ(r.exit_code, 0) << id << "\n" << r.output;
    EXPECT_EQ(verdict(dir + "/" + id), "pass") << id << "\n" << r.output;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, DeepspeedScenarios,
                         ::testing::Values("deepspeed-visible-devices-beyond-counted-slots",
                                           "deepspeed-hostfile-slots-below-included-gpus",
                                           "deepspeed-include-whole-host-selects-nothing",
                                           "deepspeed-set-device-by-global-rank"));

}  // namespace
}  // namespace fl::harness
