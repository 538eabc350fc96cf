// The launch layer as something that goes wrong, end to end: fl-launch on its own (ranks,
// exit status, int() parsing of CUDA_VISIBLE_DEVICES), then the catalogue scenarios built on it
// and on the shared-memory transport and the simulated CPU, each run as written (the symptom
// must show) and with --fix (it must clear). A private /dev/shm needs root: that case skips
// cleanly without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

struct Run {
  test::ProcessResult proc;
  std::string dir;
  std::vector<HistoryEvent> history;
  std::string outcome;
};

std::string results_dir() {
  return test::fresh_test_dir("launch",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

Run run_file(const std::string& file, const std::string& id, std::vector<std::string> extra = {}) {
  const std::string results = results_dir();
  fs::create_directories(results);
  std::vector<std::string> argv{FAULTLINE_CLI, "run", file, "--results", results, "--run-id", id};
  for (auto& e : extra) argv.push_back(e);
  Run r;
  r.proc = test::run_process(argv, {}, std::chrono::seconds(150));
  r.dir = results + "/" + id;
  if (fs::exists(r.dir + "/history.jsonl")) r.history = read_history(r.dir + "/history.jsonl");
  if (fs::exists(r.dir + "/verdict.json")) {
    std::ifstream in(r.dir + "/verdict.json");
    r.outcome = nlohmann::json::parse(in).value("outcome", "");
  }
  return r;
}

std::string catalogue(const std::string& name) {
  return std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/issues/" + name + ".yaml";
}

std::vector<nlohmann::json> events(const Run& r, const std::string& source,
                                   const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : r.history) {
    if (e.source == source && e.kind == kind) {
      auto d = nlohmann::json::parse(e.data_json);
      d["_rank"] = e.rank;
      out.push_back(d);
    }
  }
  return out;
}

// What ranks 0..ranks-1 of run `r` printed, one after the other.
std::string rank_logs(const Run& r, int ranks) {
  std::string logs;
  for (int k = 0; k < ranks; ++k) {
    std::ifstream in(r.dir + "/ranks/rank" + std::to_string(k) + "/output.log");
    logs += std::string((std::istreambuf_iterator<char>(in)), {});
  }
  return logs;
}

int processes_mentioning(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    if (cmd.find(dir) != std::string::npos) ++n;
  }
  return n;
}

std::set<std::string> shm_files() {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

TEST(FlLaunch, StartsRanksFromItsBaseAndPassesTheFirstFailureOn) {
  // A port of its own: the default 29500 is bound by the launcher-in-a-launcher tests that ctest
  // runs beside this one (stop 74's CI saw that store's EADDRINUSE here).
  const std::string port = std::to_string(test::free_port());
  auto r = test::run_process(
      {FAULTLINE_LAUNCH, "--nproc", "3", "--rank-base", "4", "--", "/usr/bin/env"},
      {{"RANK", "4"}, {"MASTER_PORT", port}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want :
       {"RANK=4\n", "RANK=5\n", "RANK=6\n", "LOCAL_RANK=2\n", "LOCAL_WORLD_SIZE=3\n"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  auto f = test::run_process({FAULTLINE_LAUNCH, "--nproc", "2", "--", "/bin/false"},
                             {{"MASTER_PORT", std::to_string(test::free_port())}});
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find("failed: exit status 1"), std::string::npos) << f.output;
}

TEST(FlLaunch, ReadingDevicesWithIntFailsOnAUuidAsPythonsIntDoes) {
  const std::map<std::string, std::string> uuid = {{"CUDA_VISIBLE_DEVICES", "0,GPU-8932f937"}};
  auto r = test::run_process({FAULTLINE_LAUNCH, "--devices", "int", "--", "/bin/true"}, uuid);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("ValueError: invalid literal for int() with base 10: 'GPU-8932f937'"),
            std::string::npos)
      << r.output;
  // int() takes whitespace, a sign and underscores between digits; the CUDA reading takes all.
  EXPECT_EQ(test::run_process({FAULTLINE_LAUNCH, "--devices", "int", "--", "/bin/true"},
                              {{"CUDA_VISIBLE_DEVICES", " 0, +1,1_0"}})
                .exit_code,
            0);
  EXPECT_EQ(
      test::run_process({FAULTLINE_LAUNCH, "--devices", "cuda", "--", "/bin/true"}, uuid).exit_code,
      0);
}

// torchrun inside every srun task: several launchers host the store on MASTER_PORT. The one that
// binds first starts its node's workers; the others fail on the bind before starting anything.
TEST(LauncherScenarios, ALauncherInsideALauncherBindsTheStorePortTwice) {
  auto r = run_file(catalogue("torchrun-inside-srun-tasks-port-in-use"), "twice");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass") << r.proc.output;
  EXPECT_NE(r.proc.output.find("address already in use (EADDRINUSE)"), std::string::npos)
      << r.proc.output;
  // Only the launcher that holds the port started workers: no rank was claimed twice.
  EXPECT_EQ(r.proc.output.find("is claimed by"), std::string::npos) << r.proc.output;
  EXPECT_EQ(processes_mentioning(r.dir), 0);
  auto fixed = run_file(catalogue("torchrun-inside-srun-tasks-port-in-use"), "once", {"--fix"});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  EXPECT_EQ(fixed.outcome, "pass");
}

TEST(LauncherScenarios, GpuUuidsBreakALauncherThatParsesIndicesAndWorkWhereCudaReadsThem) {
  auto r = run_file(catalogue("launcher-int-parse-of-gpu-uuids"), "uuid");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass");
  // The fix passes the UUIDs on: every rank resolves its own and finishes.
  auto fixed = run_file(catalogue("launcher-int-parse-of-gpu-uuids"), "uuid-fix", {"--fix"});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  EXPECT_EQ(fixed.outcome, "pass");
}

TEST(LauncherScenarios, AnAvx512KernelOnACpuWithoutItDiesOfSigill) {
  auto r = run_file(catalogue("cpu-adam-built-for-avx512-illegal-instruction"), "sigill");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass");
  bool ill = false;
  for (auto& x : events(r, "harness", "rank_exit")) {
    ill |= x.value("class", "") == "crash" && x.value("code", 0) == 4;  // SIGILL
  }
  EXPECT_TRUE(ill) << r.proc.output;
  auto fixed =
      run_file(catalogue("cpu-adam-built-for-avx512-illegal-instruction"), "native", {"--fix"});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
}

TEST(LauncherScenarios, ASmallDevShmIsABusErrorInsideTheAllReduce) {
  if (test::run_process({"unshare", "--mount", "true"}, {}, std::chrono::seconds(10)).exit_code !=
      0) {
    GTEST_SKIP() << "creating a mount namespace is not allowed here (needs root)";
  }
  const auto before = shm_files();
  auto r = run_file(catalogue("docker-default-shm-bus-error-in-allreduce"), "bus");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass");
  // The rank that took the signal said where: in the all-reduce, writing its segment.
  const std::string logs = rank_logs(r, 4);
  EXPECT_NE(logs.find("bus error (SIGBUS) in all_reduce"), std::string::npos) << logs;
  bool bus = false;
  for (auto& x : events(r, "harness", "rank_exit")) {
    bus |= x.value("class", "") == "crash" && x.value("code", 0) == 7;  // SIGBUS
  }
  EXPECT_TRUE(bus) << r.proc.output;
  // The segments lived in the run's own /dev/shm: the host's has nothing new.
  for (const auto& f : shm_files()) {
    EXPECT_TRUE(before.count(f) || f.rfind("faultline-shm-", 0) != 0) << f;
  }
  EXPECT_EQ(processes_mentioning(r.dir), 0);
  // Both ways out: a larger /dev/shm (the scenario's fix) and no shm transport at all.
  auto fixed = run_file(catalogue("docker-default-shm-bus-error-in-allreduce"), "big", {"--fix"});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  auto off = run_file(catalogue("docker-default-shm-bus-error-in-allreduce"), "off",
                      {"--set", "env.NCCL_SHM_DISABLE=1", "--set", "expect.absent=true"});
  EXPECT_EQ(off.proc.exit_code, 0) << off.proc.output;
}

TEST(LauncherScenarios, ASmallDevShmFailsTheSetUpOfATransportThatReservesItsSegments) {
  if (test::run_process({"unshare", "--mount", "true"}, {}, std::chrono::seconds(10)).exit_code !=
      0) {
    GTEST_SKIP() << "creating a mount namespace is not allowed here (needs root)";
  }
  const std::string file = catalogue("docker-default-shm-fails-the-shm-transport-set-up");
  const auto before = shm_files();
  auto r = run_file(file, "reserve");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass");
  // Two 24 MiB segments fit in 64 MiB; a rank whose reservation did not says so, at set-up.
  const std::string logs = rank_logs(r, 4);
  EXPECT_NE(logs.find("(size 25165824): posix_fallocate failed: No space left on device"),
            std::string::npos)
      << logs;
  EXPECT_EQ(logs.find("SIGBUS"), std::string::npos) << logs;
  int steps = 0;
  for (const auto& e : r.history) steps += e.kind == "step";
  EXPECT_EQ(steps, 0) << "the set-up failed before the first step completed";
  // The reserved segments were in the run's own /dev/shm, and the ranks are gone.
  for (const auto& f : shm_files()) {
    EXPECT_TRUE(before.count(f) || f.rfind("faultline-shm-", 0) != 0) << f;
  }
  EXPECT_EQ(processes_mentioning(r.dir), 0);
  // PyTorch's words for it under the pytorch dialect: NCCL's system error and its last warning.
  auto torch = run_file(file, "torch", {"--set", "workload.fidelity=pytorch"});
  EXPECT_EQ(torch.proc.exit_code, 0) << torch.proc.output;
  const std::string torch_logs = rank_logs(torch, 4);
  EXPECT_NE(torch_logs.find("unhandled system error (run with NCCL_DEBUG=INFO for details)"),
            std::string::npos)
      << torch_logs;
  EXPECT_NE(torch_logs.find("Error while creating shared memory segment /dev/shm/faultline-shm-"),
            std::string::npos)
      << torch_logs;
  // The fix, a larger /dev/shm, trains.
  auto fixed = run_file(file, "big", {"--fix"});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
}

}  // namespace
}  // namespace fl::harness
