// The local launcher's direct launch of MPI worlds (issue 39 above 8 ranks; since stop 72 every
// world of 2 or more, FourRankLocalWorld... below): the harness is the
// ranks' PMIx server, so every rank's MPI_Init gives the whole MPI_COMM_WORLD, with no orted per
// rank (an MPI singleton's start) and no ompi-server. Real runs of the real harness: a clean
// 16-rank world, one whose rank 5 is SIGKILLed, and a run whose recovery tool is a program of its
// own (it may restart ranks one by one), which keeps MPI singletons; worlds in network namespaces
// (the server relayed into the run's hub), one of them with a link cut. Nothing timed.
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pids of processes named `name` whose environment holds FAULTLINE_RUN_ID=`run_id` (what the
// harness gives each rank, and what an orted a rank forks inherits).
std::set<int> processes_of_run(const std::string& name, const std::string& run_id) {
  std::set<int> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return found;
  const std::string needle = "FAULTLINE_RUN_ID=" + run_id + std::string(1, '\0');
  while (const dirent* e = ::readdir(d)) {
    const std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string comm = read_file("/proc/" + pid + "/comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (comm != name) continue;
    if (read_file("/proc/" + pid + "/environ").find(needle) != std::string::npos) {
      found.insert(std::stoi(pid));
    }
  }
  ::closedir(d);
  return found;
}

struct WorldRun {
  test::ProcessResult proc;
  std::string outcome;
  std::vector<nlohmann::json> launches;  // the harness's `launch` events' data
  size_t orteds = 0;                     // distinct orted processes seen while it ran
};

// Runs `yaml` (plus `extra` arguments) as run `id` under `dir`, looking for the run's orteds
// every 50 ms while it runs.
WorldRun run_world(const std::string& dir, const std::string& id, const std::string& yaml,
                   std::vector<std::string> extra = {},
                   std::map<std::string, std::string> env = {}) {
  const std::string file = dir + "/" + id + ".yaml";
  std::ofstream(file) << yaml;
  std::atomic<bool> done{false};
  std::set<int> orteds;
  std::thread watch([&] {
    while (!done) {
      for (int pid : processes_of_run("orted", id)) orteds.insert(pid);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<std::string> argv = {FAULTLINE_CLI, "run", file, "--results", dir, "--run-id", id};
  argv.insert(argv.end(), extra.begin(), extra.end());
  WorldRun w;
  env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
  env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  w.proc = test::run_process(argv, env, std::chrono::seconds(300));
  done = true;
  watch.join();
  w.orteds = orteds.size();
  std::ifstream vin(dir + "/" + id + "/verdict.json");
  if (vin) w.outcome = nlohmann::json::parse(vin).value("outcome", "");
  std::ifstream hin(dir + "/" + id + "/history.jsonl");
  for (std::string line; std::getline(hin, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("source", "") == "harness" && e.value("kind", "") == "launch") {
      w.launches.push_back(e["data"]);
    }
  }
  return w;
}

std::string world_yaml(const std::string& name, int ranks, const std::string& rest,
                       const std::string& timeouts = "{run_s: 280, rendezvous_ms: 240000}") {
  return "name: " + name + "\n" + "topology: {ranks: " + std::to_string(ranks) +
         ", dp: " + std::to_string(ranks / 2) + ", tp: 2, backend: mpi, launcher: local}\n" +
         "timeouts: " + timeouts + "\nseed: 7\n" + rest;
}

TEST(DirectLaunch, SixteenRankLocalWorldStartsWholeThroughTheHarnessWithNoOrted) {
  const std::string dir = test::fresh_test_dir("direct-launch", "clean16");
  const auto w = run_world(dir, "clean16",
                           world_yaml("clean16", 16,
                                      "workload: {model: tiny, steps: 2, precision: fp32}\n"
                                      "expect: {oracle: completed}\n"));
  ASSERT_FALSE(w.proc.timed_out) << w.proc.output;
  EXPECT_EQ(w.proc.exit_code, 0) << w.proc.output;
  EXPECT_EQ(w.outcome, "pass") << w.proc.output;
  ASSERT_EQ(w.launches.size(), 16u) << w.proc.output;
  for (const auto& d : w.launches) {
    EXPECT_EQ(d.value("mpi_start", ""), "pmix") << d.dump();
    EXPECT_EQ(d.value("mpi_start_why", ""), "16 ranks, started whole by the harness") << d.dump();
  }
  EXPECT_EQ(w.orteds, 0u) << "an MPI singleton's start forks one orted per rank";
  EXPECT_FALSE(fs::exists(dir + "/clean16/tmp/ompi-server.uri"));
  fs::remove_all(dir);
}

TEST(DirectLaunch, SixteenRankWorldWhoseRankIsKilledEndsWithThatRanksSignalVerdict) {
  const std::string dir = test::fresh_test_dir("direct-launch", "kill16");
  const auto w =
      run_world(dir, "kill16",
                world_yaml("kill16", 16,
                           "workload: {model: tiny, steps: 8, precision: fp32}\n"
                           "faults:\n  - {signal: KILL, rank: 5, step: 2}\n"
                           "expect: {oracle: exit_class, exit_class: signal, ranks: [5]}\n",
                           "{run_s: 280, rendezvous_ms: 240000, comm_ms: 5000}"));
  ASSERT_FALSE(w.proc.timed_out) << w.proc.output;
  EXPECT_EQ(w.outcome, "pass") << w.proc.output;
  ASSERT_EQ(w.launches.size(), 16u) << w.proc.output;
  for (const auto& d : w.launches) EXPECT_EQ(d.value("mpi_start", ""), "pmix") << d.dump();
  EXPECT_EQ(w.orteds, 0u);
  fs::remove_all(dir);
}

// Every rank of the run passed and was launched the same way (`mpi_start`), for the reason given.
void expect_every_rank_started(const WorldRun& w, size_t ranks, const std::string& start,
                               const std::string& why) {
  ASSERT_FALSE(w.proc.timed_out) << w.proc.output;
  EXPECT_EQ(w.outcome, "pass") << w.proc.output;
  ASSERT_EQ(w.launches.size(), ranks) << w.proc.output;
  for (const auto& d : w.launches) {
    EXPECT_EQ(d.value("mpi_start", ""), start) << d.dump();
    EXPECT_EQ(d.value("mpi_start_why", ""), why) << d.dump();
  }
}

// Since stop 72 a small world starts whole too: no orted and no ompi-server (a singleton start
// forked one orted per rank, a third of a 2-rank run's CPU time on 2 cores and 45% of a 4-rank
// run's). FAULTLINE_MPI_START=singleton keeps the singletons (restart_rank needs them); another
// value is refused naming what is allowed.
TEST(DirectLaunch, FourRankLocalWorldStartsWholeUnlessSingletonsAreAskedFor) {
  const std::string dir = test::fresh_test_dir("direct-launch", "clean4");
  const std::string yaml =
      "name: clean4\ntopology: {ranks: 4, dp: 4, backend: mpi, launcher: local}\nseed: 7\n"
      "workload: {model: tiny, steps: 2, precision: fp32}\nexpect: {oracle: completed}\n";
  const auto whole = run_world(dir, "whole4", yaml);
  expect_every_rank_started(whole, 4, "pmix", "4 ranks, started whole by the harness");
  EXPECT_EQ(whole.orteds, 0u);
  EXPECT_FALSE(fs::exists(dir + "/whole4/tmp/ompi-server.uri"));
  const auto singles = run_world(dir, "single4", yaml, {}, {{"FAULTLINE_MPI_START", "singleton"}});
  expect_every_rank_started(singles, 4, "singleton", "FAULTLINE_MPI_START=singleton");
  EXPECT_GT(singles.orteds, 0u) << "an MPI singleton's start forks an orted";
  const auto bad = run_world(dir, "bad4", yaml, {}, {{"FAULTLINE_MPI_START", "singletons"}});
  EXPECT_EQ(bad.proc.exit_code, 2) << bad.proc.output;
  EXPECT_NE(bad.proc.output.find("FAULTLINE_MPI_START=singletons: allowed: auto, singleton"),
            std::string::npos)
      << bad.proc.output;
  fs::remove_all(dir);
}

// restart_rank starts one rank alone, which cannot join a world that started whole: a recovery
// tool of the run's own (which may call it) keeps the singleton start, and says why.
TEST(DirectLaunch, RunWhoseRecoveryToolIsItsOwnProgramKeepsMpiSingletons) {
  const std::string dir = test::fresh_test_dir("direct-launch", "tool10");
  const auto w = run_world(dir, "tool10",
                           world_yaml("tool10", 10,
                                      "workload: {model: tiny, steps: 2, precision: fp32}\n"
                                      "expect: {oracle: completed}\n"),
                           {"--recovery", "/bin/true"});
  expect_every_rank_started(w, 10, "singleton",
                            "recovery '/bin/true' may restart ranks one by one (restart_rank), "
                            "which cannot join a world started whole");
  EXPECT_GT(w.orteds, 0u) << "the watch must see a singleton's orted";
  fs::remove_all(dir);
}

// PMIx 4.2's clients reach their server over TCP on the harness's loopback, which a rank in a
// network namespace cannot: such a world reaches it through a relay listening in the run's hub
// namespace (the bridge every node's namespace reaches), and starts whole too.
TEST(DirectLaunch, TenRankWorldInNetworkNamespacesStartsWholeThroughARelayInTheRunsHub) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  const std::string dir = test::fresh_test_dir("direct-launch", "netns10");
  const auto w = run_world(dir, "netns10",
                           world_yaml("netns10", 10,
                                      "workload: {model: tiny, steps: 2, precision: fp32}\n"
                                      "expect: {oracle: completed}\n"),
                           {"--set", "topology.network=namespaces"});
  expect_every_rank_started(w, 10, "pmix",
                            "10 ranks, in network namespaces: the server through a relay at "
                            "10.200.0.254 in the run's hub");
  EXPECT_EQ(w.orteds, 0u) << "an MPI singleton's start forks one orted per rank";
  EXPECT_FALSE(fs::exists(dir + "/netns10/tmp/ompi-server.uri"));
  fs::remove_all(dir);
}

// All ranks of a direct launch sit on one PMIx node, where Open MPI would pass messages through
// shared memory between namespaces: the cut link must still stall a cross-node all-reduce (dp
// crosses the two nodes, tp stays inside each).
TEST(DirectLaunch, TwelveRankWorldOverTwoNamespacedNodesWhoseLinkIsCutTimesOutAcrossNodes) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  const std::string dir = test::fresh_test_dir("direct-launch", "cut12");
  const auto w = run_world(dir, "cut12",
                           "name: cut12\n"
                           "topology: {ranks: 12, nodes: 2, dp: 6, tp: 2, backend: mpi, "
                           "launcher: local, network: namespaces}\n"
                           "timeouts: {run_s: 280, rendezvous_ms: 240000, comm_ms: 3000}\n"
                           "seed: 7\n"
                           "workload: {model: tiny, steps: 40, precision: fp32}\n"
                           "faults:\n  - network: {action: drop, node: 1}\n    step: 3\n"
                           "expect: {oracle: comm_timeout}\n");
  ASSERT_FALSE(w.proc.timed_out) << w.proc.output;
  EXPECT_EQ(w.outcome, "pass") << w.proc.output;
  ASSERT_EQ(w.launches.size(), 12u) << w.proc.output;
  for (const auto& d : w.launches) EXPECT_EQ(d.value("mpi_start", ""), "pmix") << d.dump();
  EXPECT_EQ(w.proc.output.find("on group tp (seq "), std::string::npos) << w.proc.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
