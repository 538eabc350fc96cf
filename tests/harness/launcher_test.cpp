// The launcher registry (harness/launch/launcher.hpp): names, kinds and traits agree with each
// other and with the scenario schema, and an unknown name is refused with what is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "harness/launch/launcher.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {
namespace {

TEST(Launchers, EveryNameParsesBackToItsKindAndMakesALauncherOfThatKind) {
  std::set<std::string> names;
  for (const auto* l : launchers()) {
    EXPECT_TRUE(names.insert(l->name).second) << "duplicate launcher name " << l->name;
    EXPECT_EQ(launcher_kind(l->name), l->kind) << l->name;
    EXPECT_EQ(&launcher_info(l->kind), l) << l->name;
    ASSERT_TRUE(l->make) << l->name;
    const auto made = l->make();
    ASSERT_NE(made, nullptr) << l->name;
    EXPECT_EQ(made->kind(), l->kind) << l->name;
    EXPECT_FALSE(l->summary.empty()) << l->name;
  }
  EXPECT_TRUE(names.count("local"));
  EXPECT_TRUE(names.count("mpirun"));
}

TEST(Launchers, TraitsOfLocalAndMpirun) {
  const auto& local = launcher_info(LauncherKind::kLocal);
  EXPECT_TRUE(local.rank_processes);
  EXPECT_FALSE(local.aborts_on_rank_failure);  // the runner's fail-fast tears the job down
  const auto& mpirun = launcher_info(LauncherKind::kMpirun);
  EXPECT_FALSE(mpirun.rank_processes);
  EXPECT_TRUE(mpirun.aborts_on_rank_failure);
  EXPECT_TRUE(launcher_has_rank_processes("local"));
  EXPECT_FALSE(launcher_has_rank_processes("mpirun"));
  const std::string allowed = rank_process_launchers();
  EXPECT_NE(allowed.find("local"), std::string::npos);
  EXPECT_EQ(allowed.find("mpirun"), std::string::npos);
}

TEST(Launchers, UnknownNameIsRefusedWithTheAllowedOnes) {
  try {
    launcher_kind("pbs");
    FAIL() << "no error for an unknown launcher";
  } catch (const ScenarioError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'pbs'"), std::string::npos) << msg;
    for (const auto& n : launcher_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

TEST(Launchers, SchemaAllowsExactlyTheRegisteredLaunchers) {
  const auto& schema = scenario_schema();
  auto it = std::find_if(schema.begin(), schema.end(),
                         [](const KeySpec& k) { return k.path == "topology.launcher"; });
  ASSERT_NE(it, schema.end());
  // `auto` (the default) lets the loader pick one of them (harness/scenario/launcher_choice.cpp).
  auto registered = launcher_names();
  registered.insert(registered.begin(), "auto");
  EXPECT_EQ(it->choices, registered);
  EXPECT_EQ(it->default_value, "auto");
  for (const auto& n : launcher_names()) EXPECT_NE(it->doc.find(n + ": "), std::string::npos);
}

// Exit attribution before anything started: mpirun owns a job process (whose end ends the ranks
// that did not report theirs) but no pid yet; the local launcher has none, and no rank pid yet.
TEST(Launchers, JobProcessAttributionBeforeAStart) {
  auto mpirun = launcher_info(LauncherKind::kMpirun).make();
  EXPECT_EQ(mpirun->job_process_name(), "mpirun");
  EXPECT_FALSE(mpirun->is_job_process(0));  // a synthetic exit with pid 0 is not mpirun's
  EXPECT_EQ(mpirun->rank_pid(0), 0);
  auto local = launcher_info(LauncherKind::kLocal).make();
  EXPECT_EQ(local->job_process_name(), "");
  EXPECT_FALSE(local->is_job_process(0));
  EXPECT_EQ(local->rank_pid(0), 0);
}

// The MCA parameters that spare each MPI process the fabric probing
// (harness/launch/mpi_tuning.hpp): MPI-backend runs on this machine only, and never over what the
// scenario sets itself.
TEST(Launchers, LocalMpiParamsOnlyForOneMachineAndNeverOverTheScenario) {
  using Params = std::vector<std::pair<std::string, std::string>>;
  Scenario s;
  s.topo.backend = "mpi";
  EXPECT_EQ(local_mpi_params(s), (Params{{"pml", "ob1"}, {"osc", "^ucx"}, {"btl", "^openib,ofi"}}));
  s.env.all["OMPI_MCA_pml"] = "ucx";
  s.env.per_rank[3]["OMPI_MCA_btl"] = "self,tcp";
  EXPECT_EQ(local_mpi_params(s), (Params{{"osc", "^ucx"}}));
  Scenario across = Scenario();
  across.topo.backend = "mpi";
  across.topo.hosts = {"node1", "node2"};
  EXPECT_TRUE(local_mpi_params(across).empty());  // a cluster's fabric is the cluster's choice
  Scenario nccl;
  nccl.topo.backend = "nccl";
  EXPECT_TRUE(local_mpi_params(nccl).empty());
}

// Singletons more than the CPUs yield while they wait in MPI (mpi_tuning.hpp), as mpirun makes
// its ranks do when oversubscribed; never over the scenario's own choice, never across hosts.
TEST(Launchers, SingletonsMoreThanTheCpusYieldWhenIdleUnlessTheScenarioSaysOtherwise) {
  using Params = std::vector<std::pair<std::string, std::string>>;
  Scenario s;
  s.topo.backend = "mpi";
  s.topo.ranks = 32;
  EXPECT_EQ(singleton_mpi_params(s, 2), (Params{{"mpi_yield_when_idle", "1"}}));
  EXPECT_TRUE(singleton_mpi_params(s, 32).empty());  // a CPU each: spinning is the fast wait
  s.env.per_rank[0]["OMPI_MCA_mpi_yield_when_idle"] = "0";
  EXPECT_TRUE(singleton_mpi_params(s, 2).empty());
  Scenario across;
  across.topo.backend = "mpi";
  across.topo.ranks = 32;
  across.topo.hosts = {"node1", "node2"};
  EXPECT_TRUE(singleton_mpi_params(across, 2).empty());
  EXPECT_GE(usable_cpus(), 1);
}

// hwloc without its I/O discovery and plugins (mpi_tuning.hpp), under the same conditions: one
// machine, the MPI backend, and a variable the scenario sets itself (env or any rank's) wins.
TEST(Launchers, LocalMpiEnvSkipsHwlocIoDiscoveryOnlyForOneMachineAndNeverOverTheScenario) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  Scenario s;
  s.topo.backend = "mpi";
  const Env all = local_mpi_env(s);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, "HWLOC_PLUGINS_BLACKLIST");
  for (const char* plugin : {"hwloc_pci", "hwloc_opencl", "hwloc_gl"}) {
    EXPECT_NE(all[0].second.find(plugin), std::string::npos) << plugin;
  }
  EXPECT_EQ(all[1], (std::pair<std::string, std::string>{"HWLOC_COMPONENTS", "-linuxio"}));
  s.env.per_rank[5]["HWLOC_COMPONENTS"] = "linux,x86";
  EXPECT_EQ(local_mpi_env(s), (Env{all[0]}));
  s.env.all["HWLOC_PLUGINS_BLACKLIST"] = "";
  EXPECT_TRUE(local_mpi_env(s).empty());
  Scenario across;
  across.topo.backend = "mpi";
  across.topo.hosts = {"node1", "node2"};
  EXPECT_TRUE(local_mpi_env(across).empty());  // each node's topology is its own business
  Scenario nccl;
  nccl.topo.backend = "nccl";
  EXPECT_TRUE(local_mpi_env(nccl).empty());  // NCCL needs the GPUs' and NICs' PCI places
}

}  // namespace
}  // namespace fl::harness
