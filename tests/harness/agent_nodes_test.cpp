// Which agents a fault's host-side work goes to (harness/faults/agent_nodes.hpp): the rank's host
// with topology.hosts, every node's agent with launcher srun and no hosts (Slurm places the rank),
// none otherwise; and the rank's node found by asking each agent in turn (signal 0).
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <set>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"

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
    dir_ = (std::filesystem::temp_directory_path() /
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

}  // namespace
}  // namespace fl::harness::faults
