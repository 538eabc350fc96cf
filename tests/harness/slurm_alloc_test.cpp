// launcher srun's allocation check (harness/launch/slurm_alloc.hpp) without a cluster: a fake
// `scontrol show hostnames` expands the node list, topology.hosts land on the nodes in order,
// and an allocation with too few nodes or tasks, no node list or no Slurm at all is refused
// naming both counts (the real single-node Slurm: slurm.srun_hosts, slurm.srun_agents).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/launch/slurm_alloc.hpp"
#include "harness/model/scenario.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string test_dir() {
  return test::fresh_test_dir("slurm_alloc",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

void write_exec(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
}

// Sets (or unsets, with nullptr) variables for the test's lifetime.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto& [k, v] : vars) {
      const char* old = std::getenv(k);
      saved_.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
      if (v) {
        ::setenv(k, v, 1);
      } else {
        ::unsetenv(k);
      }
    }
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// DIR/bin with a fake srun and a scontrol that expands "n[1-3]"-style lists the way Slurm does
// (one name a line) and fails for anything with "bad" in it.
std::string fake_bin(const std::string& dir) {
  const std::string bin = dir + "/bin";
  fs::create_directories(bin);
  write_exec(bin + "/srun", "#!/bin/bash\nexit 0\n");
  write_exec(bin + "/scontrol", R"(#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] || { echo "fake scontrol: $*" >&2; exit 1; }
[[ $3 == *bad* ]] && { echo "scontrol: error: Invalid hostlist: $3" >&2; exit 1; }
python3 - "$3" <<'PY'
import re, sys
for part in re.findall(r'[^,\[]+(?:\[[^\]]*\])?', sys.argv[1]):
    m = re.match(r'(.*)\[(.*)\]$', part)
    if not m:
        print(part); continue
    for r in m.group(2).split(','):
        a, _, b = r.partition('-')
        for i in range(int(a), int(b or a) + 1):
            print(f"{m.group(1)}{i:0{len(a)}d}")
PY
)");
  return bin;
}

Scenario topology(int ranks, std::vector<std::string> hosts) {
  Scenario s;
  s.topo.ranks = ranks;
  s.topo.launcher = "srun";
  s.topo.hosts = std::move(hosts);
  s.topo.host_addrs.assign(s.topo.hosts.size(), "");
  return s;
}

std::string refusal(const Scenario& s) {
  try {
    check_srun_allocation(s);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

TEST(SlurmAlloc, TheNodeListIsExpandedByScontrolInOrder) {
  const auto dir = test_dir();
  ScopedEnv env({{"PATH", (fake_bin(dir) + ":/usr/bin:/bin").c_str()}});
  EXPECT_EQ(expand_nodelist("gpu[07-09],cpu2"),
            (std::vector<std::string>{"gpu07", "gpu08", "gpu09", "cpu2"}));
  try {
    expand_nodelist("bad[");
    ADD_FAILURE() << "a bad list was expanded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("`scontrol show hostnames bad[` did not name"),
              std::string::npos)
        << e.what();
  }
}

TEST(SlurmAlloc, LogicalHostsLandOnTheAllocationsNodesInOrder) {
  const auto dir = test_dir();
  ScopedEnv env({{"PATH", (fake_bin(dir) + ":/usr/bin:/bin").c_str()},
                 {"SLURM_JOB_ID", "77"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                 {"SLURM_NODELIST", nullptr},
                 {"SLURM_NTASKS", "4"}});
  const auto a = check_srun_allocation(topology(4, {"a", "b"}));
  EXPECT_EQ(a.job, "77");
  EXPECT_EQ(a.nodes, (std::vector<std::string>{"n1", "n2", "n3"}));
  EXPECT_EQ(a.host_nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(a.mapping(), (std::map<std::string, std::string>{{"a", "n1"}, {"b", "n2"}}));
  // The agents: one per host, named as the host, on its node.
  EXPECT_EQ(a.agent_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.agent_nodes(), (std::vector<std::string>{"n1", "n2"}));
  // Without hosts: one agent on every node of the allocation, named as the node.
  const auto b = check_srun_allocation(topology(2, {}));
  EXPECT_TRUE(b.mapping().empty());
  EXPECT_EQ(b.agent_names(), b.nodes);
  EXPECT_EQ(b.agent_nodes(), b.nodes);
}

// launcher mpirun inside an allocation: hosts that are its nodes get the allocation (agents by
// srun, no ssh); any host outside it, a scenario's own rsh agent, no allocation or another
// launcher leave the hosts to the rsh agent.
TEST(SlurmAlloc, MpirunHostsThatAreTheAllocationsNodesUseItAndAnyOtherSetupDoesNot) {
  const auto dir = test_dir();
  const std::string path = fake_bin(dir) + ":/usr/bin:/bin";
  ScopedEnv env({{"PATH", path.c_str()},
                 {"SLURM_JOB_ID", "78"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                 {"SLURM_NODELIST", nullptr}});
  Scenario s = topology(4, {"n3", "n1"});
  s.topo.launcher = "mpirun";
  const auto a = mpirun_allocation(s);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job, "78");
  EXPECT_EQ(a->agent_names(), (std::vector<std::string>{"n3", "n1"}));
  EXPECT_EQ(a->agent_nodes(), (std::vector<std::string>{"n3", "n1"}));  // by name, not order
  EXPECT_EQ(a->mapping(), (std::map<std::string, std::string>{{"n1", "n1"}, {"n3", "n3"}}));
  Scenario outside = topology(4, {"n1", "elsewhere"});
  outside.topo.launcher = "mpirun";
  EXPECT_FALSE(mpirun_allocation(outside).has_value());
  Scenario own_agent = s;
  own_agent.topo.rsh_agent = "/usr/bin/ssh";
  EXPECT_FALSE(mpirun_allocation(own_agent).has_value());
  EXPECT_FALSE(mpirun_allocation(topology(4, {"n1", "n2"})).has_value());  // launcher srun
  ScopedEnv no_job({{"SLURM_JOB_ID", nullptr}});
  EXPECT_FALSE(mpirun_allocation(s).has_value());
}

TEST(SlurmAlloc, TooFewNodesOrTasksAreRefusedNamingBothCounts) {
  const auto dir = test_dir();
  ScopedEnv env({{"PATH", (fake_bin(dir) + ":/usr/bin:/bin").c_str()},
                 {"SLURM_JOB_ID", "77"},
                 {"SLURM_JOB_NODELIST", "n[1-2]"},
                 {"SLURM_NTASKS", "3"}});
  const std::string nodes = refusal(topology(3, {"a", "b", "c"}));
  EXPECT_NE(nodes.find("topology.hosts lists 3 host(s) but the allocation has 2 node(s) (n1,n2)"),
            std::string::npos)
      << nodes;
  EXPECT_NE(nodes.find("nothing was launched"), std::string::npos) << nodes;
  const std::string tasks = refusal(topology(4, {"a", "b"}));
  EXPECT_NE(tasks.find("the allocation has 3 task(s) (SLURM_NTASKS) but topology.ranks is 4"),
            std::string::npos)
      << tasks;
}

TEST(SlurmAlloc, NoSlurmNoAllocationOrNoNodeListIsRefused) {
  const auto dir = test_dir();
  const std::string bin = fake_bin(dir);
  {
    ScopedEnv env({{"PATH", "/nonexistent"}, {"SLURM_JOB_ID", "77"}});
    EXPECT_NE(refusal(topology(1, {})).find("launcher srun: no srun on PATH"), std::string::npos);
  }
  {
    ScopedEnv env({{"PATH", bin.c_str()}, {"SLURM_JOB_ID", nullptr}});
    EXPECT_NE(refusal(topology(1, {})).find("not inside a Slurm allocation (SLURM_JOB_ID"),
              std::string::npos);
  }
  {
    ScopedEnv env({{"PATH", bin.c_str()},
                   {"SLURM_JOB_ID", "77"},
                   {"SLURM_JOB_NODELIST", nullptr},
                   {"SLURM_NODELIST", nullptr}});
    EXPECT_NE(refusal(topology(1, {})).find("job 77 has no node list"), std::string::npos);
  }
}

using Vars = std::vector<std::pair<std::string, std::string>>;

Scenario mpi_world(int ranks, std::vector<std::string> hosts) {
  Scenario s = topology(ranks, std::move(hosts));
  s.topo.backend = "mpi";
  return s;
}

SlurmAllocation nodes_of(std::vector<std::string> nodes, std::vector<std::string> hosts = {}) {
  SlurmAllocation a;
  a.nodes = std::move(nodes);
  a.hosts = hosts;
  a.host_nodes = std::move(hosts);
  return a;
}

// What srun's environment gives the ranks: one machine's Open MPI settings when every rank is on
// one node, and yielding only when a node has more ranks than CPUs; the scenario's own values
// and the NCCL backend are left alone.
TEST(SlurmAlloc, SrunRanksGetOneNodeSettingsAndYieldOnlyWhenANodeHasMoreRanksThanCpus) {
  const Vars one_node = {
      {"OMPI_MCA_pml", "ob1"},
      {"OMPI_MCA_osc", "^ucx"},
      {"OMPI_MCA_btl", "^openib,ofi"},
      {"HWLOC_PLUGINS_BLACKLIST", "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml"},
      {"HWLOC_COMPONENTS", "-linuxio"}};
  const Vars yield = {{"OMPI_MCA_mpi_yield_when_idle", "1"}};
  Vars both = one_node;
  both.insert(both.end(), yield.begin(), yield.end());
  EXPECT_EQ(srun_mpi_env(mpi_world(4, {}), nodes_of({"n1"}), 2), both);
  EXPECT_EQ(srun_mpi_env(mpi_world(2, {}), nodes_of({"n1"}), 2), one_node);
  // Spread over two nodes: 2 ranks a node on 2 CPUs do not yield, 3 do; the fabric is the
  // cluster's choice.
  EXPECT_EQ(srun_mpi_env(mpi_world(4, {}), nodes_of({"n1", "n2"}), 2), Vars{});
  EXPECT_EQ(srun_mpi_env(mpi_world(5, {}), nodes_of({"n1", "n2"}), 2), yield);
  // topology.hosts (each on a node of its own): ranks counted over the hosts, and no one-machine
  // settings, as for mpirun over hosts.
  EXPECT_EQ(srun_mpi_env(mpi_world(4, {"a"}), nodes_of({"n1"}, {"n1"}), 2), yield);
  EXPECT_EQ(srun_mpi_env(mpi_world(4, {"a", "b"}), nodes_of({"n1", "n2", "n3"}, {"n1", "n2"}), 2),
            Vars{});
  Scenario own = mpi_world(4, {});
  own.env.all["OMPI_MCA_pml"] = "ucx";
  own.env.per_rank[1]["OMPI_MCA_mpi_yield_when_idle"] = "0";
  EXPECT_EQ(srun_mpi_env(own, nodes_of({"n1"}), 2), Vars(one_node.begin() + 1, one_node.end()));
  Scenario nccl = mpi_world(4, {});
  nccl.topo.backend = "nccl";
  EXPECT_EQ(srun_mpi_env(nccl, nodes_of({"n1"}), 2), Vars{});
}

// Rank r's command from a multi-program file, as slurmstepd reads it: the line whose task range
// holds r, with %t its rank and %o its offset into the range.
std::string command_of(const std::string& file, int r) {
  std::istringstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto sp = line.find(' ');
    const std::string range = line.substr(0, sp);
    const auto dash = range.find('-');
    const int lo = std::stoi(range.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
    if (r < lo || r > hi) continue;
    std::string prog = line.substr(sp + 1);
    for (auto [key, value] : {std::pair{"%t", r}, std::pair{"%o", r - lo}}) {
      for (auto at = prog.find(key); at != std::string::npos; at = prog.find(key, at)) {
        prog.replace(at, 2, std::to_string(value));
      }
    }
    return prog;
  }
  return "(no line for rank " + std::to_string(r) + ")";
}

// Rank r of `ranks` on `nodes` logical nodes, as the harness writes it (long run directory).
std::string rank_line(int r, int ranks, int nodes = 1, const std::string& extra = "") {
  const std::string dir = "/home/someone/experiments/faultline-results/run-2026-11-29/ranks/rank";
  const int per_node = ranks / nodes;
  return fmt::format(
      "env -C {0}{1} FAULTLINE_EVENTS_FILE={0}{1}/events.jsonl FAULTLINE_FIRED_LOG={0}{1}/"
      "fired.jsonl FAULTLINE_FLIGHT_RECORDER_DIR={0}{1} LOCAL_RANK={2} LOCAL_WORLD_SIZE={3} "
      "NODE_RANK={4} RANK={1} WORLD_SIZE={5}{6} "
      "/opt/faultline/bin/fl-train --device cpu --steps 1 --dp {5} --tp 1 --checksum",
      dir, r, r % per_node, per_node, r / per_node, ranks, extra);
}

// Ranks whose commands differ only in their number share a line (their rank as %t, their place
// on a node as %o), so that 128 ranks fit srun's 60000-byte limit; every rank still gets exactly
// its own command.
TEST(SlurmAlloc, SrunMultiProgGivesEveryRankItsOwnCommandInOneLinePerRange) {
  std::vector<std::string> lines;
  for (int r = 0; r < 128; ++r) lines.push_back(rank_line(r, 128));
  size_t one_per_rank = 0;
  for (auto& l : lines) one_per_rank += l.size() + 5;
  EXPECT_GT(one_per_rank, 60000u);  // what srun refused ("Multi_prog config file ... too large")
  const std::string file = srun_multi_prog(lines);
  EXPECT_EQ(file.substr(0, file.find(" FAULTLINE_FIRED_LOG")),
            "0-127 env -C /home/someone/experiments/faultline-results/run-2026-11-29/ranks/"
            "rank%t FAULTLINE_EVENTS_FILE=/home/someone/experiments/faultline-results/"
            "run-2026-11-29/ranks/rank%t/events.jsonl");
  EXPECT_EQ(std::count(file.begin(), file.end(), '\n'), 1);
  for (int r = 0; r < 128; ++r) ASSERT_EQ(command_of(file, r), lines[r]) << r;
  // Four logical nodes: LOCAL_RANK restarts on each, one line a node; a rank with a command of
  // its own (a fault's variable) splits its node's range.
  lines.clear();
  for (int r = 0; r < 128; ++r) lines.push_back(rank_line(r, 128, 4, r == 40 ? " X=1" : ""));
  const std::string nodes = srun_multi_prog(lines);
  std::vector<std::string> ranges;
  std::istringstream in(nodes);
  for (std::string l; std::getline(in, l);) ranges.push_back(l.substr(0, l.find(' ')));
  EXPECT_EQ(ranges, (std::vector<std::string>{
                        "0-31", "32-39", "40", "41", "42", "43", "44",    "45",    "46", "47",
                        "48",   "49",    "50", "51", "52", "53", "54",    "55",    "56", "57",
                        "58",   "59",    "60", "61", "62", "63", "64-95", "96-127"}));
  for (int r = 0; r < 128; ++r) ASSERT_EQ(command_of(nodes, r), lines[r]) << r;
  EXPECT_EQ(srun_multi_prog({"true"}), "0 true\n");
}

TEST(SlurmAlloc, SrunMultiProgRefusesPercentTooLongLinesAndTooLargeFilesNamingTheRank) {
  auto error_of = [](const std::vector<std::string>& lines) -> std::string {
    try {
      srun_multi_prog(lines);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(error_of({"true", "env A=50%x true"}),
            "launcher srun: rank 1's command has a '%' ('env A=50%x true'): slurmstepd replaces "
            "%t and %o in a multi-program file (allowed: no '%' in the scenario's env, args and "
            "paths, or launcher: mpirun)");
  std::string words = "env";
  for (int i = 0; i < 127; ++i) words += " A" + std::to_string(i) + "=1";
  EXPECT_EQ(error_of({"true", words + " true"}),
            "launcher srun: rank 1's command has 129 words and its line 789 characters; srun's "
            "multi-program file takes at most 127 words and 16382 characters a line (allowed: "
            "fewer env variables, or launcher: mpirun)");
  EXPECT_EQ(error_of({"env A=" + std::string(16380, 'x') + " true"}),
            "launcher srun: rank 0's command has 3 words and its line 16393 characters; srun's "
            "multi-program file takes at most 127 words and 16382 characters a line (allowed: "
            "fewer env variables, or launcher: mpirun)");
  // Commands that differ in more than their rank (a seed each) cannot share lines.
  std::vector<std::string> seeds;
  for (int r = 0; r < 128; ++r) {
    seeds.push_back(rank_line(r, 128, 1, " SEED=" + std::to_string(r * 7919 + 13)));
  }
  const std::string big = error_of(seeds);
  const std::string head = "launcher srun: the multi-program file for 128 ranks has ";
  ASSERT_EQ(big.substr(0, head.size()), head) << big;
  EXPECT_GT(std::stoul(big.substr(head.size())), 60000u) << big;
  EXPECT_EQ(big.substr(big.find(" bytes")),
            " bytes and srun takes at most 60000 (the ranks' commands differ in more than their "
            "rank; allowed: fewer env variables or rank_env entries, or launcher: mpirun)");
}

}  // namespace
}  // namespace fl::harness
