// Out-of-process faults end to end through `faultline run`: each injected, its symptom observed
// by the oracle, healed, and nothing left behind (no namespace, mount, cgroup, process or backup
// file). Also: the same scenario and seed fire the same faults three times over, and a run
// replayed from its fired logs fires them again. Faults that need root (namespaces, mounts,
// cgroups) skip with a message where the machine does not allow them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
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
  return test::fresh_test_dir("oop",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// A second run's folder beside results_dir(), removed at exit too.
std::string results_dir(const std::string& suffix) {
  return test::removed_at_exit(results_dir() + "-" + suffix).string();
}

bool mounted_under(const std::string& dir) {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(dir) != std::string::npos) return true;
  }
  return false;
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

Run run(const std::string& results, const std::string& yaml, const std::string& name,
        std::vector<std::string> extra = {}) {
  fs::create_directories(results);
  const std::string file = results + "/" + name + ".yaml";
  std::ofstream(file) << yaml;
  std::vector<std::string> argv{FAULTLINE_CLI, "run", file, "--results", results, "--run-id", name};
  for (auto& e : extra) argv.push_back(e);
  Run r;
  r.proc = test::run_process(argv, {}, std::chrono::seconds(120));
  r.dir = results + "/" + name;
  if (fs::exists(r.dir + "/history.jsonl")) r.history = read_history(r.dir + "/history.jsonl");
  if (fs::exists(r.dir + "/verdict.json")) {
    std::ifstream in(r.dir + "/verdict.json");
    r.outcome = nlohmann::json::parse(in).value("outcome", "");
  }
  return r;
}

std::vector<nlohmann::json> harness_events(const Run& r, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : r.history) {
    if (e.source == "harness" && e.kind == kind) {
      auto d = nlohmann::json::parse(e.data_json);
      d["_rank"] = e.rank;
      d["_t"] = e.t_ns;
      out.push_back(d);
    }
  }
  return out;
}

bool can(const std::vector<std::string>& argv) {
  return test::run_process(argv, {}, std::chrono::seconds(10)).exit_code == 0;
}

#define REQUIRE_NAMESPACES()                         \
  if (!can({"unshare", "--net", "--mount", "true"})) \
  GTEST_SKIP() << "creating network and mount namespaces is not allowed here (needs root)"

TEST(OutOfProcessFaults, LinkCutMidRunTimesOutAcrossNodesWhileTheControlPlaneSurvives) {
  REQUIRE_NAMESPACES();
  // dp crosses the two nodes, tp stays inside each: cutting node 1 off at step 3 stalls a
  // cross-node all-reduce; telemetry goes over a unix socket that no network fault touches.
  auto r = run(results_dir(), R"y(name: link-cut
topology: {ranks: 4, nodes: 2, tp: 2}
workload: {steps: 40}
faults:
  - network: {action: drop, node: 1}
    step: 3
timeouts: {comm_ms: 3000}
expect: {oracle: comm_timeout}
)y",
               "cut");
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  // Only groups that span both nodes can stall: dp (0,2)/(1,3) or world (the loss average), and
  // which one hits the cut first depends on where in the step it lands. Never tp: (0,1)/(2,3).
  const bool cross_node =
      r.proc.output.find("all_reduce on group dp (seq ") != std::string::npos ||
      r.proc.output.find("all_reduce on group world (seq ") != std::string::npos;
  EXPECT_TRUE(cross_node) << r.proc.output;
  EXPECT_EQ(r.proc.output.find("on group tp (seq "), std::string::npos) << r.proc.output;
  auto injected = harness_events(r, "fault_injected");
  ASSERT_EQ(injected.size(), 1u);
  EXPECT_EQ(injected[0]["peers"], nlohmann::json::array({0}));
  // Ranks on the cut node kept streaming after the cut (their errors among them), not only
  // through the file merge at the end.
  int streamed_after = 0;
  for (const auto& e : r.history) {
    if (e.source == "rank" && e.rank >= 2 && !e.late && e.t_ns > injected[0]["_t"].get<int64_t>())
      ++streamed_after;
  }
  EXPECT_GT(streamed_after, 0);
  auto healed = harness_events(r, "fault_healed");
  bool net = false, ns = false;
  for (auto& h : healed) {
    net |= h["fault"] == "network";
    if (h["fault"] == "namespaces") {
      ns = true;
      EXPECT_EQ(h["holders_left"], 0);
    }
  }
  EXPECT_TRUE(net && ns);
  // Nothing of the run is left: its namespace holders ended (holders_left above) and no process
  // names its directory. (The machine's namespaces are not compared: tests that run beside this
  // one make and remove their own, and such a check failed in stop 74's CI on another test's.)
  EXPECT_EQ(processes_mentioning(r.dir), 0);
}

TEST(OutOfProcessFaults, StoreBehindAFirewallRefusesTheConnection) {
  REQUIRE_NAMESPACES();
  auto r = run(results_dir(), R"y(name: store-firewall
topology: {ranks: 4, nodes: 2}
workload: {steps: 4}
faults:
  - network: {action: reject, node: 1, store: true}
    at: launch
timeouts: {rendezvous_ms: 3000}
expect: {oracle: error_signature, pattern: "cannot reach the rendezvous store .*ECONNREFUSED"}
)y",
               "fw");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  // Only the firewalled node's ranks are refused; node 0's ranks time out waiting for them.
  std::ifstream log(r.dir + "/ranks/rank0/output.log");
  const std::string rank0((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(rank0.find("missing: ranks 2-3"), std::string::npos) << rank0;
}

TEST(OutOfProcessFaults, BandwidthLimitIsInstalledAndRemoved) {
  REQUIRE_NAMESPACES();
  auto r = run(results_dir(), R"y(name: slow-link
topology: {ranks: 2, nodes: 2}
workload: {steps: 3}
faults:
  - network: {action: bandwidth, node: 1, rate: 4mbit}
    at: launch
expect: {oracle: completed}
)y",
               "bw");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  auto inj = harness_events(r, "fault_injected");
  ASSERT_EQ(inj.size(), 1u);
  EXPECT_EQ(inj[0]["rate"], "4mbit");
  EXPECT_EQ(harness_events(r, "fault_healed").size(), 2u);  // the qdisc, then the namespaces
}

// topology.nics gives each node a second port; the route fault sends node 1's traffic to node 0
// out through it. The route fault counts the bytes the port sent while its routes stood: the
// ranks' gradients when it stands from launch, next to nothing when it goes in as they exit.
TEST(OutOfProcessFaults, RouteSendsANodesTrafficOutThroughItsSecondPortUntilHealed) {
  REQUIRE_NAMESPACES();
  auto scenario = [](const std::string& at) {
    return fmt::format(R"y(name: second-port
topology: {{ranks: 2, nodes: 2, nics: [unlimited]}}
workload: {{steps: 4}}
faults:
  - network: {{action: route, node: 1, nic: 1}}
    at: {}
expect: {{oracle: completed}}
)y",
                       at);
  };
  int64_t sent[2] = {-1, -1};
  int i = 0;
  for (const std::string at : {"launch", "exit"}) {
    auto r = run(results_dir(at), scenario(at), "route-" + at);
    EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
    auto setup = harness_events(r, "network_setup");
    ASSERT_EQ(setup.size(), 1u);
    EXPECT_EQ(setup[0]["nics"][0]["subnet"], "10.200.1.0/24");
    auto inj = harness_events(r, "fault_injected");
    ASSERT_EQ(inj.size(), 1u) << r.proc.output;
    EXPECT_EQ(inj[0]["device"], "eth1");
    EXPECT_EQ(inj[0]["peers"], nlohmann::json::array({0}));
    int holders_left = -1;
    for (const auto& h : harness_events(r, "fault_healed")) {
      if (h.value("fault", "") == "route") sent[i] = h.value("sent_bytes", int64_t{-1});
      if (h.value("fault", "") == "namespaces") holders_left = h.value("holders_left", -1);
    }
    // The run's own namespaces (not the machine's: other tests run beside this one) ended.
    EXPECT_EQ(holders_left, 0) << at;
    EXPECT_TRUE(harness_events(r, "heal_error").empty()) << r.proc.output;
    ++i;
  }
  // Four steps' gradient all-reduces of the default model leave node 1 through eth1 (about
  // 500 kB); a route put in as the ranks exit sees at most a few packets.
  EXPECT_GT(sent[0], 100000) << "launch";
  EXPECT_GE(sent[1], 0);
  EXPECT_LT(sent[1], 20000) << "exit";
}

TEST(OutOfProcessFaults, FullDiskFailsTheCheckpointWriteAndIsUnmounted) {
  REQUIRE_NAMESPACES();
  auto r = run(results_dir(), R"y(name: disk-full
topology: {ranks: 2}
workload: {steps: 6, checkpoint: {every: 2}}
faults:
  - disk_full: {path: checkpoints, size: 16k}
expect: {oracle: checkpoint_error}
)y",
               "disk");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_NE(r.proc.output.find("No space left on device"), std::string::npos) << r.proc.output;
  EXPECT_FALSE(mounted_under(r.dir));
  // The ranks wrote into the small filesystem, which is gone: nothing of it on the host.
  EXPECT_FALSE(fs::exists(r.dir + "/checkpoints/step_2"));
  EXPECT_EQ(processes_mentioning(r.dir), 0);
}

TEST(OutOfProcessFaults, MemoryLimitBringsTheKernelOomKiller) {
  if (::access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) != 0) {
    GTEST_SKIP() << "no writable cgroup v1 memory hierarchy at /sys/fs/cgroup/memory";
  }
  auto r = run(results_dir(), R"y(name: oom-killer
topology: {ranks: 2}
workload: {steps: 200}
faults:
  - memory_limit: 150m
    rank: 1
  - plan: "optimizer.step[rank=1]=leak(20000000)"
timeouts: {comm_ms: 3000}
expect: {oracle: exit_class, exit_class: oom_kill, ranks: [1]}
)y",
               "oom");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  auto kills = harness_events(r, "oom_kill");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0]["_rank"], 1);
  const std::string cgroup = kills[0]["cgroup"];
  EXPECT_FALSE(fs::exists(cgroup)) << "cgroup left behind";
  // Host 0's in-process node made the group (its report), the rank joined it at spawn, and the
  // node reported the kill and removed the group: one fault_healed, as through an agent.
  EXPECT_EQ(kills[0]["via"], "local");
  for (auto& e : harness_events(r, "fault_injected")) {
    if (e["fault"] != "memory_limit") continue;
    EXPECT_EQ(e["agent"]["cgroup"], cgroup);
    EXPECT_EQ(e["agent"]["host"], "local");
    EXPECT_EQ(e["agent"]["placed"], "at_spawn");
  }
  auto usage = harness_events(r, "cgroup_memory");
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0]["oom_kills"], kills[0]["kills"]);
  EXPECT_EQ(usage[0]["via"], "local");
  std::vector<nlohmann::json> healed;
  for (auto& e : harness_events(r, "fault_healed")) {
    if (e["fault"] == "memory_limit") healed.push_back(e);
  }
  ASSERT_EQ(healed.size(), 1u);
  EXPECT_EQ(healed[0]["removed"], true);
  // What the rank left running (its MPI singleton's daemon, if still there) went back out first.
  EXPECT_TRUE(healed[0]["moved_back"].is_number()) << healed[0];
  // A SIGKILL sent by a signal fault is not mistaken for the OOM killer.
  auto k = run(results_dir("kill"), R"y(name: killed
topology: {ranks: 2}
workload: {steps: 200}
faults:
  - signal: KILL
    rank: 1
    step: 2
timeouts: {comm_ms: 3000}
expect: {oracle: exit_class, exit_class: oom_kill}
)y",
               "kill");
  EXPECT_EQ(k.outcome, "fail") << k.proc.output;
}

// With a device arena the limit counts only the rank's host memory: its device tensors live in a
// tmpfs file the harness allocated (charged to the harness). The same 300 MB limit then passes
// without offload (the rank's own memory peaks near 245 MB, the end-of-run checksum's host copy of
// the weights included; its ~320 MB of device tensors would not fit besides) and OOM-kills the
// rank when ZeRO-Offload moves ~230 MB of optimizer state (fp32 master weights, moments, gradients
// of its partition) to the host. The collective timeout is 10 s, not 3: near its limit the
// offloading rank reclaims pages before the kernel kills it, and on a busy machine (a stop-65 CI
// run, its reference GEMM at 10% of its usual speed) that took over 3 s, so rank 0's all_reduce
// timed out first and no rank was OOM-killed. After the kill rank 0 waits out its own timeout
// (30 s would add 27 s to every run of this test).
TEST(OutOfProcessFaults, DeviceArenaLeavesOnlyHostMemoryUnderTheLimitSoOffloadCrossesIt) {
  if (::access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) != 0) {
    GTEST_SKIP() << "no writable cgroup v1 memory hierarchy at /sys/fs/cgroup/memory";
  }
  auto scenario = [](bool offload) {
    return std::string(R"y(name: offload-host-oom
topology: {ranks: 2, dp: 2, zero: 2}
workload:
  steps: 3
  model: small
  micro_batch: 1
  args: ["--seq-len", "16", "--d-model", "768"]
  zero: {offload_optimizer: )y") +
           (offload ? "true" : "false") + R"y(}
faults:
  - {memory_limit: 300m, device_arena: 512m, rank: 1}
timeouts: {comm_ms: 10000}
expect: {oracle: exit_class, exit_class: oom_kill, ranks: [1], absent: )y" +
           (offload ? "false" : "true") + "}\n";
  };
  auto kept = run(results_dir("device"), scenario(false), "device");
  EXPECT_EQ(kept.proc.exit_code, 0) << kept.proc.output;
  EXPECT_TRUE(harness_events(kept, "oom_kill").empty()) << kept.proc.output;
  std::vector<nlohmann::json> arena;
  for (auto& e : harness_events(kept, "fault_injected")) {
    if (e["fault"] == "device_arena") arena.push_back(e);
  }
  ASSERT_EQ(arena.size(), 1u) << kept.proc.output;
  EXPECT_EQ(arena[0]["_rank"], 1);
  EXPECT_EQ(arena[0]["via"], "local");  // held by host 0's in-process node (the harness)
  EXPECT_FALSE(fs::exists(arena[0]["file"].get<std::string>())) << "arena file left behind";
  // The rank's cgroup never held its device memory (~320 MB in the arena).
  auto usage = harness_events(kept, "cgroup_memory");
  ASSERT_EQ(usage.size(), 1u) << kept.proc.output;
  EXPECT_LT(usage[0]["max_usage"].get<int64_t>(), 300 << 20);

  auto offloaded = run(results_dir("host"), scenario(true), "host");
  EXPECT_EQ(offloaded.proc.exit_code, 0) << offloaded.proc.output;
  auto kills = harness_events(offloaded, "oom_kill");
  ASSERT_EQ(kills.size(), 1u) << offloaded.proc.output;
  EXPECT_EQ(kills[0]["_rank"], 1);
}

// On this machine a CPU quota goes through host 0's in-process node as through a host's agent:
// the node makes the rank's group, the rank joins it at spawn, the node sets the quota at the
// step, and when released reports cpu.stat, moves what is left back and removes the group.
TEST(OutOfProcessFaults, CpuQuotaOnThisMachineGoesThroughHostZerosNode) {
  if (::access("/sys/fs/cgroup/cpu/cgroup.procs", W_OK) != 0) {
    GTEST_SKIP() << "no writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu";
  }
  // Enough steps after the limit that the rank still runs under it: with 6, a fast rank had
  // finished before the quota was written, and its group counted no period (seen in CI).
  auto r = run(results_dir(), R"y(name: cpu-quota
topology: {ranks: 2}
workload: {steps: 40}
faults:
  - {cpu_quota: 0.5, rank: 1, step: 2}
timeouts: {comm_ms: 30000}
expect: {oracle: completed}
)y",
               "cpu");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.outcome, "pass") << r.proc.output;
  std::vector<nlohmann::json> inj, healed;
  for (auto& e : harness_events(r, "fault_injected")) {
    if (e["fault"] == "cpu_quota") inj.push_back(e);
  }
  for (auto& e : harness_events(r, "fault_healed")) {
    if (e["fault"] == "cpu_quota") healed.push_back(e);
  }
  ASSERT_EQ(inj.size(), 1u) << r.proc.output;
  EXPECT_EQ(inj[0]["_rank"], 1);
  EXPECT_EQ(inj[0]["via"], "local");
  EXPECT_FALSE(inj[0].contains("host"));
  const std::string cgroup = inj[0]["cgroup"];
  EXPECT_EQ(cgroup.rfind("/sys/fs/cgroup/cpu/faultline.", 0), 0u) << cgroup;
  EXPECT_EQ(inj[0]["agent"]["cgroup"], cgroup);
  EXPECT_EQ(inj[0]["agent"]["host"], "local");
  EXPECT_EQ(inj[0]["agent"]["placed"], "at_spawn");
  EXPECT_EQ(inj[0]["agent"]["quota_us"], 50000);
  // The kernel ran the rank under the quota: its group had periods (the rank was in it).
  auto stat = harness_events(r, "cgroup_cpu");
  ASSERT_EQ(stat.size(), 1u);
  EXPECT_EQ(stat[0]["_rank"], 1);
  EXPECT_EQ(stat[0]["via"], "local");
  EXPECT_EQ(stat[0]["placed"], "at_spawn");
  EXPECT_GT(stat[0]["nr_periods"].get<int64_t>(), 0) << stat[0];
  ASSERT_EQ(healed.size(), 1u);
  EXPECT_EQ(healed[0]["via"], "local");
  EXPECT_EQ(healed[0]["cgroup"], cgroup);
  EXPECT_EQ(healed[0]["removed"], true);
  // What the rank left running (its MPI singleton's daemon, if still there) went back out first.
  EXPECT_TRUE(healed[0]["moved_back"].is_number()) << healed[0];
  EXPECT_FALSE(fs::exists(cgroup)) << "cgroup left behind";
}

TEST(OutOfProcessFaults, TruncatedShardFailsTheResumeAndIsRestoredAfterwards) {
  auto r = run(results_dir(), R"y(name: truncated-shard
topology: {ranks: 2}
workload: {steps: 4, checkpoint: {every: 4}}
faults:
  - file: {path: "checkpoints/step_4/shard_rank1.bin", action: truncate, bytes: 100}
    at: exit
    restart: true
timeouts: {comm_ms: 3000}
expect: {oracle: checkpoint_error, ranks: [1]}
)y",
               "trunc");
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  auto inj = harness_events(r, "fault_injected");
  ASSERT_EQ(inj.size(), 1u);
  const int64_t size = inj[0]["size"];
  EXPECT_EQ(inj[0]["new_size"], size - 100);
  EXPECT_EQ(harness_events(r, "restart").size(), 1u);
  // Healed: the shard is whole again and the backup is gone.
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(r.dir + "/checkpoints/step_4/shard_rank1.bin")),
            size);
  EXPECT_FALSE(fs::exists(r.dir + "/.faultline"));
  // A glob that matches nothing is recorded as a failed injection, not a silent pass.
  auto none = run(results_dir("none"), R"y(name: no-match
topology: {ranks: 1}
workload: {steps: 2}
faults:
  - file: {path: "checkpoints/nothing*", action: delete}
    at: exit
expect: {oracle: completed}
)y",
                  "none");
  auto failed = harness_events(none, "fault_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0]["error"].get<std::string>().find("no file in the run directory matches"),
            std::string::npos);
}

TEST(OutOfProcessFaults, HiddenPluginFailsOnlyThatRank) {
  auto r = run(results_dir(), R"y(name: hidden-plugin
topology: {ranks: 2}
workload: {steps: 3, plugins: [fused_adamw]}
faults:
  - hide: libfl_fused_adamw.so
    rank: 1
timeouts: {comm_ms: 3000}
expect: {oracle: error_signature, ranks: [1],
         pattern: "cannot load kernel plugin 'fused_adamw': libfl_fused_adamw.so: cannot open shared object file"}
)y",
               "hide");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_TRUE(fs::exists(r.dir + "/ranks/rank0/plugins/libfl_fused_adamw.so"));
  // Healed once the ranks were gone: the link is back, and the history says what was hidden.
  EXPECT_TRUE(fs::is_symlink(r.dir + "/ranks/rank1/plugins/libfl_fused_adamw.so"));
  auto healed = harness_events(r, "fault_healed");
  ASSERT_EQ(healed.size(), 1u);
  EXPECT_EQ(healed[0]["fault"], "hide");
  EXPECT_EQ(healed[0]["dir"], r.dir + "/ranks/rank1/plugins");
  EXPECT_EQ(healed[0]["via"], "local");
  // A library that does not exist is an input error naming what is there.
  auto bad = run(results_dir("bad"), R"y(name: bad-hide
topology: {ranks: 1}
workload: {steps: 1}
faults:
  - hide: libfl_nothing.so
)y",
                 "bad");
  EXPECT_EQ(bad.proc.exit_code, 2) << bad.proc.output;
  EXPECT_NE(bad.proc.output.find("hide: no library 'libfl_nothing.so' in the plugin directory"),
            std::string::npos)
      << bad.proc.output;
}

std::vector<std::string> fired_lines(const std::string& dir, int ranks) {
  std::vector<std::string> out;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir + "/ranks/rank" + std::to_string(r) + "/fired.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      out.push_back(fmt::format("{} r{} s{} e{} {}", j["site"].get<std::string>(),
                                j["rank"].get<int>(), j["step"].get<int64_t>(),
                                j["eval"].get<uint64_t>(), j["action"].get<std::string>()));
    }
  }
  return out;
}

TEST(FaultDeterminism, SameSeedFiresTheSameFaultsThreeTimesAndReplayFiresThemAgain) {
  const std::string yaml = R"y(name: random-faults
topology: {ranks: 4, dp: 2, tp: 2}
workload: {steps: 8}
faults:
  - plan: "comm.all_reduce=15%delay(1);data.fetch[rank=1-2]=30%sleep(1);optimizer.step=25%delay(2)"
seed: 42
expect: {oracle: completed}
)y";
  const auto results = results_dir();
  std::vector<std::vector<std::string>> logs;
  for (int i = 0; i < 3; ++i) {
    auto r = run(results, yaml, "seed42-" + std::to_string(i));
    ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
    logs.push_back(fired_lines(r.dir, 4));
  }
  ASSERT_GT(logs[0].size(), 20u);
  EXPECT_EQ(logs[0], logs[1]);
  EXPECT_EQ(logs[0], logs[2]);
  // Another seed fires other hits.
  auto other = run(results, yaml, "seed43", {"--set", "seed=43"});
  EXPECT_NE(fired_lines(other.dir, 4), logs[0]);
  // Replay: the plan is the fired log itself, with no probability left.
  auto rp = test::run_process(
      {FAULTLINE_CLI, "replay", results + "/seed42-0", "--results", results + "/replay"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(rp.exit_code, 0) << rp.output;
  EXPECT_EQ(rp.output.find('%'), std::string::npos) << rp.output;
  std::string replay_dir;
  for (auto& e : fs::directory_iterator(results + "/replay")) replay_dir = e.path().string();
  EXPECT_EQ(fired_lines(replay_dir, 4), logs[0]);
}

}  // namespace
}  // namespace fl::harness
