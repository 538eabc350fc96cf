// Which agents a fault's host-side work goes to (harness/faults/agent_nodes.hpp): the rank's host
// with topology.hosts, every node's agent with launcher srun and no hosts (Slurm places the rank),
// none otherwise; and the rank's node found by asking each agent in turn (signal 0). Without
// agents this machine is host 0: the cgroup faults' requests go to its in-process node, which
// makes the rank's group, has the rank join it at spawn and holds a device arena.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <boost/asio/io_context.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness::faults {
namespace {

// Agents named after nodes; rank 3 runs as pid 4242 on node 1; node 2's agent is down.
class FakeAgents : public HostAgents {
 public:
  std::vector<std::pair<int, int>> asked;  // (node, signal)
  bool up(int node) const override { return node != 2; }
  std::string run(int, const std::vector<std::string>&) override { return ""; }
  bool signal(int node, int rank, pid_t pid, int sig, std::string& why) override {
    asked.emplace_back(node, sig);
    if (node == 1 && rank == 3 && pid == 4242) return true;
    why = "pid is not rank " + std::to_string(rank) + " of this run here";
    return false;
  }
  void on_loss(int, const std::vector<std::string>&) override {}
  int count() const override { return 3; }
  std::string name(int node) const override { return "n" + std::to_string(node + 1); }
};

class AgentNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fl::test::removed_at_exit(std::filesystem::temp_directory_path() /
                                     ("faultline-agent-nodes-" + std::to_string(::getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    hist_ = std::make_unique<History>(dir_ + "/history.jsonl");
    sup_ = std::make_unique<Supervisor>(
        io_, [](int, const std::string&, const std::string&, const std::string&) {},
        [](const ExitInfo&) {});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The fault's view of a run of `s` with `agents` (nullptr: none).
  template <class F>
  void with_host(const Scenario& s, HostAgents* agents, F f) {
    Sandbox box(s, dir_, *hist_, *sup_);
    box.set_agents(agents);
    std::vector<std::string> injected;
    Host h{s, dir_, *hist_, *sup_, box, 0, "", injected};
    f(h);
  }
  std::string dir_;
  boost::asio::io_context io_;
  std::unique_ptr<History> hist_;
  std::unique_ptr<Supervisor> sup_;
};

TEST_F(AgentNodes, HostsGiveTheRanksHostSrunWithoutHostsGivesEveryNodeElseNone) {
  FakeAgents agents;
  Scenario hosts;
  hosts.topo.ranks = 4;
  hosts.topo.launcher = "srun";
  hosts.topo.hosts = {"a", "b"};
  with_host(hosts, &agents, [](Host& h) {
    EXPECT_EQ(fault_nodes(h, 3), std::vector<int>({1}));
    EXPECT_EQ(fault_nodes(h, -1), std::vector<int>({0, 1}));
    EXPECT_EQ(node_name(h, 1), "b");
  });
  Scenario placed;
  placed.topo.ranks = 4;
  placed.topo.launcher = "srun";
  EXPECT_TRUE(slurm_places_ranks(placed));
  EXPECT_FALSE(slurm_places_ranks(hosts));
  with_host(placed, &agents, [](Host& h) {
    EXPECT_EQ(fault_nodes(h, 3), std::vector<int>({0, 1, 2}));
    EXPECT_EQ(fault_nodes(h, -1), std::vector<int>({0, 1, 2}));
    EXPECT_EQ(node_name(h, 2), "n3");
  });
  // Without agents a fault would act on the harness's machine, which is no node of the ranks.
  with_host(placed, nullptr, [](Host& h) {
    try {
      fault_nodes(h, 3);
      ADD_FAILURE() << "fault_nodes gave nodes without agents";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3 needs the run's agents"), std::string::npos)
          << e.what();
    }
  });
  Scenario local;
  local.topo.ranks = 4;
  local.topo.launcher = "mpirun";
  EXPECT_FALSE(slurm_places_ranks(local));
  with_host(local, &agents, [](Host& h) { EXPECT_TRUE(fault_nodes(h, 1).empty()); });
}

TEST_F(AgentNodes, TheRanksNodeIsTheAgentThatFindsItsPidWithSignalZero) {
  FakeAgents agents;
  Scenario placed;
  placed.topo.ranks = 4;
  placed.topo.launcher = "srun";
  with_host(placed, &agents, [&](Host& h) {
    std::string why;
    EXPECT_EQ(locate_rank(h, 3, 4242, why), 1);
    // Nothing is sent: every question was signal 0, and the down agent was not asked.
    for (const auto& [node, sig] : agents.asked) EXPECT_EQ(sig, 0);
    agents.asked.clear();
    EXPECT_EQ(locate_rank(h, 3, 999, why), -1);
    EXPECT_EQ(agents.asked.size(), 2u);
    EXPECT_EQ(why,
              "n1: pid is not rank 3 of this run here; n2: pid is not rank 3 of this run here; "
              "n3: its agent is not up");
  });
}

bool spawns_ranks(const std::string&) {
  return true;
}
std::string spawning_launchers() {
  return "local";
}

// A fault of the scenario's as the loader makes it from one `faults:` item.
std::unique_ptr<Fault> fault_of(Scenario& s, const std::string& item) {
  const std::string file = "s.yaml", at = "faults[0]";
  return parse_fault({file, at, s, spawns_ranks, spawning_launchers}, YAML::Load(item));
}

// The history's harness events of `kind` (for fault_injected and fault_healed: of fault `fault`).
std::vector<nlohmann::json> events(const History& hist, const std::string& kind,
                                   const std::string& fault = "") {
  std::vector<nlohmann::json> out;
  for (const auto& e : hist.events()) {
    if (e.source != "harness" || e.kind != kind) continue;
    auto data = nlohmann::json::parse(e.data_json);
    if (!fault.empty() && data.value("fault", "") != fault) continue;
    out.push_back(std::move(data));
  }
  return out;
}

// The cgroup of `controller` that `pid` is in, as /proc/PID/cgroup names it.
std::string cgroup_of(pid_t pid, const std::string& controller) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find("," + controller + ",") != std::string::npos) return line.substr(b + 1);
  }
  return "";
}

bool cgroup_v1_writable(const std::string& controller) {
  return ::access(("/sys/fs/cgroup/" + controller + "/cgroup.procs").c_str(), W_OK) == 0;
}

TEST_F(AgentNodes, OnThisMachineCpuQuotaGoesToHostZerosNodeAndTheRankJoinsItsGroupAtSpawn) {
  if (!cgroup_v1_writable("cpu")) GTEST_SKIP() << "no writable cgroup v1 cpu hierarchy";
  Scenario s;
  s.topo.ranks = 2;
  auto f = fault_of(s, "{cpu_quota: 0.5, rank: 1, step: 2}");
  with_host(s, nullptr, [&](Host& h) {
    f->setup(h);
    // The node made the group; the harness's spawn of rank 1 (and only of rank 1) joins it.
    ProcessSpec spec, other;
    std::map<std::string, std::string> env;
    h.box.adjust_rank(0, other, env);
    EXPECT_TRUE(other.cgroup_procs.empty());
    h.box.adjust_rank(1, spec, env);
    ASSERT_EQ(spec.cgroup_procs.size(), 1u);
    const std::string group = spec.cgroup_procs[0].substr(0, spec.cgroup_procs[0].rfind('/'));
    EXPECT_EQ(group.rfind("/sys/fs/cgroup/cpu/faultline.", 0), 0u) << group;
    spec.name = "rank 1";
    spec.rank = 1;
    spec.argv = {"sleep", "30"};
    const pid_t pid = h.sup.spawn(spec);
    EXPECT_EQ("/sys/fs/cgroup/cpu" + cgroup_of(pid, "cpu"), group);

    ASSERT_TRUE(f->inject(h, nullptr, When::kLaunch));
    const auto inj = events(h.hist, "fault_injected", "cpu_quota");
    ASSERT_EQ(inj.size(), 1u);
    EXPECT_EQ(inj[0]["via"], "local");
    EXPECT_EQ(inj[0]["cgroup"], group);
    // The node's own report: host 0 ("local") set 50 ms per 100 ms on the group it made.
    EXPECT_EQ(inj[0]["agent"]["host"], "local");
    EXPECT_EQ(inj[0]["agent"]["cgroup"], group);
    EXPECT_EQ(inj[0]["agent"]["placed"], "at_spawn");
    EXPECT_EQ(inj[0]["agent"]["quota_us"], 50000);
    std::ifstream quota(group + "/cpu.cfs_quota_us");
    int64_t us = 0;
    quota >> us;
    EXPECT_EQ(us, 50000);

    // Released while the rank runs: cpu.stat recorded, the rank moved back, the group gone.
    f->heal(h, false);
    f->heal(h, true);
    const auto healed = events(h.hist, "fault_healed", "cpu_quota");
    ASSERT_EQ(healed.size(), 1u);
    EXPECT_EQ(healed[0]["via"], "local");
    EXPECT_EQ(healed[0]["cgroup"], group);
    EXPECT_EQ(healed[0]["removed"], true);
    EXPECT_EQ(healed[0]["moved_back"], 1);
    const auto stat = events(h.hist, "cgroup_cpu");
    ASSERT_EQ(stat.size(), 1u);
    EXPECT_EQ(stat[0]["via"], "local");
    EXPECT_EQ(stat[0]["placed"], "at_spawn");
    EXPECT_FALSE(std::filesystem::exists(group));
    EXPECT_NE("/sys/fs/cgroup/cpu" + cgroup_of(pid, "cpu"), group);
    ProcessSpec later;
    h.box.adjust_rank(1, later, env);
    EXPECT_TRUE(later.cgroup_procs.empty()) << "a rank started after the release joins no group";
    h.sup.signal(pid, SIGKILL);
  });
  sup_->teardown(std::chrono::milliseconds(500));
}

TEST_F(AgentNodes, OnThisMachineHostZerosNodeMakesTheMemoryGroupAndHoldsTheDeviceArena) {
  if (!cgroup_v1_writable("memory")) GTEST_SKIP() << "no writable cgroup v1 memory hierarchy";
  Scenario s;
  s.topo.ranks = 2;
  auto f = fault_of(s, "{memory_limit: 300m, device_arena: 8m, rank: 1}");
  with_host(s, nullptr, [&](Host& h) {
    f->setup(h);
    const auto lim = events(h.hist, "fault_injected", "memory_limit");
    ASSERT_EQ(lim.size(), 1u);
    EXPECT_EQ(lim[0]["via"], "local");
    EXPECT_EQ(lim[0]["agent"]["host"], "local");
    EXPECT_EQ(lim[0]["agent"]["limit"], 300 << 20);
    EXPECT_EQ(lim[0]["agent"]["placed"], "at_spawn");
    const std::string group = lim[0]["cgroup"];
    // The arena is a memfd of this process (the harness's), 8 MiB, named after the group.
    const auto arena = events(h.hist, "fault_injected", "device_arena");
    ASSERT_EQ(arena.size(), 1u);
    const std::string file = arena[0]["file"];
    EXPECT_EQ(file.rfind("/proc/" + std::to_string(::getpid()) + "/fd/", 0), 0u) << file;
    EXPECT_EQ(std::filesystem::file_size(file), 8u << 20);
    EXPECT_EQ(arena[0]["memfd"], std::filesystem::path(group).filename().string() + ".arena");
    EXPECT_EQ(lim[0]["agent"]["arena"]["file"], file);

    ProcessSpec spec;
    std::map<std::string, std::string> env;
    std::vector<std::string> unset;
    Launch launch{spec, env, unset};
    h.box.adjust_rank(1, spec, env);
    f->adjust_rank(h, 1, launch);
    EXPECT_EQ(spec.cgroup_procs, std::vector<std::string>({group + "/cgroup.procs"}));
    EXPECT_EQ(env["FAULTLINE_DEVICE_ARENA"], file);

    // The rank never started: released, the group is gone and so is the arena.
    f->heal(h, false);
    const auto healed = events(h.hist, "fault_healed", "memory_limit");
    ASSERT_EQ(healed.size(), 1u);
    EXPECT_EQ(healed[0]["via"], "local");
    EXPECT_EQ(healed[0]["removed"], true);
    EXPECT_FALSE(std::filesystem::exists(group));
    EXPECT_FALSE(std::filesystem::exists(file));
  });
}

}  // namespace
}  // namespace fl::harness::faults
