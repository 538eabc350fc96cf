// DeepSpeed's runner semantics (harness/launch/ds_runner.hpp) against deepspeed/launcher/runner.py
// and launch.py: each expected value is what the named Python function returns or raises for the
// same input (checked by running the functions' source from DeepSpeed's repository on these
// inputs), and topology.deepspeed as a scenario loads it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness/launch/ds_runner.hpp"
#include "harness/model/scenario.hpp"
#include "tests/support/scenario_files.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
using ds::ActiveResources;
using ds::ResourcePool;

// "TYPE: message" of what `f` raises; "" when it returns.
template <class F>
std::string raised(F&& f) {
  try {
    f();
  } catch (const ds::RunnerError& e) {
    return e.type + ": " + e.what();
  }
  return "";
}

// runner._parse_hostfile
TEST(DsHostfile, ReadsSlotsInFileOrderSkippingCommentsAndBlankLines) {
  const auto pool = ds::parse_hostfile(
      {"# the cluster", "", "worker-1 slots=4", "  worker-0\tslots=2 max_slots=8  ", "   "});
  EXPECT_EQ(pool, (ResourcePool{{"worker-1", 4}, {"worker-0", 2}}));
}

// runner._parse_hostfile
TEST(DsHostfile, BadLinesDuplicateHostsAndEmptyFilesRaiseTheRunnersValueErrors) {
  EXPECT_EQ(raised([] {
              ds::parse_hostfile({"worker-0 slots=2", "worker-1"});
            }),
            "ValueError: Hostfile contains a bad entry: worker-1, unable to proceed with "
            "launching");
  EXPECT_EQ(raised([] { ds::parse_hostfile({"worker-0 slots = 2"}); }),
            "ValueError: Hostfile contains a bad entry: worker-0 slots = 2, unable to proceed "
            "with launching");
  EXPECT_EQ(raised([] {
              ds::parse_hostfile({"worker-0 slots=2", "worker-0 slots=4"});
            }),
            "ValueError: Hostfile contains multiple entries for worker-0, unable to proceed with "
            "launching");
  EXPECT_EQ(raised([] {
              ds::parse_hostfile({"# nothing", ""});
            }),
            "ValueError: Hostfile is empty or not formatted correctly, unable to proceed with "
            "launching.");
}

// runner.parse_resource_filter: its docstring's two examples.
TEST(DsResourceFilter, IncludeKeepsNamedSlotsAndExcludeRemovesThem) {
  const ActiveResources hosts = {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}};
  EXPECT_EQ(ds::parse_resource_filter(hosts, "worker-0@worker-1:0,2", ""),
            (ActiveResources{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 2}}}));
  EXPECT_EQ(ds::parse_resource_filter(hosts, "", "worker-1:0"),
            (ActiveResources{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {1, 2, 3}}}));
  // A whole excluded host is gone; the hostfile's order wins over the filter's.
  EXPECT_EQ(ds::parse_resource_filter(hosts, "", "worker-0"),
            (ActiveResources{{"worker-1", {0, 1, 2, 3}}}));
  EXPECT_EQ(ds::parse_resource_filter(hosts, "worker-1:3,1@worker-0:2", ""),
            (ActiveResources{{"worker-0", {2}}, {"worker-1", {1, 3}}}));
}

// runner.parse_resource_filter / parse_node_config
TEST(DsResourceFilter, InvalidFiltersRaiseTheRunnersErrors) {
  const ActiveResources hosts = {{"worker-0", {0, 1}}};
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "worker-0", "worker-0:1"); }),
            "ValueError: include_str and exclude_str are mutually exclusive.");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "worker-9:0", ""); }),
            "ValueError: Hostname 'worker-9' not found in hostfile");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "", "worker-9"); }),
            "ValueError: Hostname 'worker-9' not found in hostfile");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "", "worker-0:5"); }),
            "ValueError: No slot '5' specified on host 'worker-0'");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "worker-0:a", ""); }),
            "ValueError: invalid literal for int() with base 10: 'a'");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "worker-0:GPU-5f2e", ""); }),
            "ValueError: invalid literal for int() with base 10: 'GPU-5f2e'");
  EXPECT_EQ(raised([&] { ds::parse_resource_filter(hosts, "worker-0:0:1", ""); }),
            "ValueError: too many values to unpack (expected 2)");
}

// runner.parse_inclusion_exclusion: an included host's resources are the include's own slots, so
// a slot the hostfile does not have passes (DeepSpeed does not check it; the rank finds out).
TEST(DsInclusionExclusion, IncludedSlotsBeyondTheHostfileAreAcceptedAsDeepSpeedDoes) {
  const ResourcePool pool = {{"worker-0", 2}, {"worker-1", 2}};
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "worker-1:7", ""),
            (ActiveResources{{"worker-1", {7}}}));
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "", "worker-0:1"),
            (ActiveResources{{"worker-0", {0}}, {"worker-1", {0, 1}}}));
  EXPECT_EQ(raised([&] { ds::parse_inclusion_exclusion(pool, "", "worker-1:7"); }),
            "ValueError: No slot '7' specified on host 'worker-1'");
}

// runner.parse_inclusion_exclusion before 0.15.2 (v0.14.4's runner.py): every host has
// range(slots), an included slot must be one of them, and each NODE_SPEC applies as written (a
// later spec for the same host replaces the earlier one; slots keep their order).
TEST(DsInclusionExclusion, BeforeVersion0152IncludedSlotsAreCheckedAndSpecsApplyInTurn) {
  const ResourcePool pool = {{"worker-0", 2}, {"worker-1", 4}};
  EXPECT_TRUE(ds::legacy_filter("0.14.4"));
  EXPECT_FALSE(ds::legacy_filter("0.15.2"));
  EXPECT_FALSE(ds::legacy_filter("latest"));
  EXPECT_EQ(raised([&] { ds::parse_inclusion_exclusion(pool, "worker-1:7", "", true); }),
            "ValueError: No slot '7' specified on host 'worker-1'");
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "worker-1:3,1@worker-0:1", "", true),
            (ActiveResources{{"worker-0", {1}}, {"worker-1", {3, 1}}}));
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "worker-1:3,1@worker-1:0", "", true),
            (ActiveResources{{"worker-1", {0}}}));
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "worker-0", "", true),
            (ActiveResources{{"worker-0", {0, 1}}}));
  // The same whole-host include since 0.15.2: the host has no slots and is dropped
  // (DeepSpeed#6671).
  EXPECT_EQ(ds::parse_inclusion_exclusion(pool, "worker-0", ""), ActiveResources{});
}

// runner.encode_world_info: urlsafe_b64encode(json.dumps(...)).
TEST(DsWorldInfo, EncodesJsonDumpsAsUrlsafeBase64) {
  EXPECT_EQ(ds::encode_world_info({{"worker-0", {0, 1}}, {"worker-1", {2}}}),
            "eyJ3b3JrZXItMCI6IFswLCAxXSwgIndvcmtlci0xIjogWzJdfQ==");
  EXPECT_EQ(ds::encode_world_info({{"localhost", {1}}}), "eyJsb2NhbGhvc3QiOiBbMV19");
}

ds::RunnerWorld world_of(ds::RunnerArgs a, std::vector<std::string>* printed = nullptr) {
  std::vector<std::string> lines;
  auto w = ds::resolve_world(std::move(a), lines);
  if (printed) *printed = lines;
  return w;
}

// runner.main: CUDA_VISIBLE_DEVICES without a hostfile becomes --include localhost:LIST, unless a
// resource flag is given, when it is ignored (and the ranks get slots 0..N-1).
TEST(DsRunnerMain, VisibleDevicesWithoutHostfileBecomeTheIncludeUnlessAFlagIsGiven) {
  ds::RunnerArgs a;
  a.device_count = 4;
  a.visible_devices = "2,3";
  std::vector<std::string> printed;
  EXPECT_EQ(world_of(a, &printed).active, (ActiveResources{{"localhost", {2, 3}}}));
  EXPECT_EQ(
      printed,
      (std::vector<std::string>{"Detected VISIBLE_DEVICES=2,3: setting --include=localhost:2,3"}));
  a.num_gpus = 2;
  EXPECT_EQ(world_of(a, &printed).active, (ActiveResources{{"localhost", {0, 1}}}));
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0],
            "Detected VISIBLE_DEVICES=2,3 but ignoring it because one or several of "
            "--include/--exclude/--num_gpus/--num_nodes cl args were used. If you want to use "
            "CUDA_VISIBLE_DEVICES don't pass any of these arguments to deepspeed.");
}

// runner.main's checks and --num_nodes / --num_gpus.
TEST(DsRunnerMain, NumNodesAndNumGpusCutTheWorldAndRefuseFilters) {
  ds::RunnerArgs a;
  a.has_hostfile = true;
  a.hostfile = {"worker-0 slots=2", "worker-1 slots=4"};
  a.num_nodes = 1;
  EXPECT_EQ(world_of(a).active, (ActiveResources{{"worker-0", {0, 1}}}));
  a.num_nodes = -1;
  a.num_gpus = 3;  // not checked against slots=2
  EXPECT_EQ(world_of(a).active,
            (ActiveResources{{"worker-0", {0, 1, 2}}, {"worker-1", {0, 1, 2}}}));
  a.include = "worker-0";
  EXPECT_EQ(raised([&] { world_of(a); }),
            "ValueError: Cannot specify num_nodes/gpus with include/exclude");

  ds::RunnerArgs local;
  local.device_count = 2;
  local.num_nodes = 2;
  EXPECT_EQ(raised([&] { world_of(local); }),
            "ValueError: Num nodes is >1 but no extra nodes available via hostfile");
  local.num_nodes = -1;
  local.device_count = 0;
  EXPECT_EQ(raised([&] { world_of(local); }),
            "RuntimeError: Unable to proceed, no GPU resources available");
}

// launch.main: global ranks in node order, LOCAL_RANK = RANK % the node's processes, and each
// node's CUDA_VISIBLE_DEVICES its slot ids.
TEST(DsLaunchLayout, RanksFollowNodesAndLocalRankIsRankModuloLocalProcesses) {
  ds::RunnerWorld w;
  w.pool = {{"worker-0", 4}, {"worker-1", 4}};
  w.active = {{"worker-0", {0, 1, 2}}, {"worker-1", {1, 3}}};
  const auto procs = ds::launch_layout(w);
  ASSERT_EQ(procs.size(), 5u);
  std::vector<int> local;
  for (const auto& p : procs) local.push_back(p.local_rank);
  EXPECT_EQ(local, (std::vector<int>{0, 1, 2, 1, 0}));
  EXPECT_EQ(procs[3].host, "worker-1");
  EXPECT_EQ(procs[3].rank, 3);
  EXPECT_EQ(procs[3].node_rank, 1);
  EXPECT_EQ(procs[3].visible_devices, "1,3");
  EXPECT_EQ(procs[3].world_size, 5);
  EXPECT_EQ(procs[3].local_size, 2);
  EXPECT_EQ(procs[3].node_devices, 4);
  EXPECT_EQ(procs[0].visible_devices, "0,1,2");

  w.active.clear();  // everything excluded: launch.py's node_list[node_rank]
  EXPECT_EQ(raised([&] { ds::launch_layout(w); }), "IndexError: list index out of range");
}

class DeepspeedScenario : public test::ScenarioFiles {
 protected:
  DeepspeedScenario() : ScenarioFiles("ds") {}
};

TEST_F(DeepspeedScenario, RanksComeFromTheRunnersWorldAndTheHostfileIsResolved) {
  write("hostfile", "worker-0 slots=2\nworker-1 slots=2\n");
  const Scenario s = load_scenario(
      write("s.yaml",
            "name: s\ntopology: {launcher: deepspeed, deepspeed: {hostfile: hostfile, exclude: "
            "'worker-1:0'}}\n"));
  EXPECT_EQ(s.topo.ranks, 3);
  EXPECT_EQ(s.topo.deepspeed.exclude, "worker-1:0");
  EXPECT_EQ(s.topo.deepspeed.hostfile, (dir_ / "hostfile").string());
  EXPECT_EQ(s.resolved["topology"]["deepspeed"]["hostfile"].as<std::string>(),
            (dir_ / "hostfile").string());
  EXPECT_EQ(s.resolved["topology"]["ranks"].as<int>(), 3);

  // Inline text; a runner error is the run's to show, not the loader's.
  const Scenario bad = load_scenario(write("b.yaml",
                                           "name: b\ntopology:\n  launcher: deepspeed\n  "
                                           "deepspeed:\n    hostfile: |\n      worker-0\n"));
  EXPECT_EQ(bad.topo.deepspeed.hostfile_text, "worker-0\n");
  EXPECT_EQ(bad.topo.ranks, 1);
}

TEST_F(DeepspeedScenario, RanksThatDifferFromTheWorldAndOptionsWithoutTheLauncherAreRefused) {
  write("hostfile", "worker-0 slots=2\n");
  EXPECT_EQ(error_of("{ranks: 4, launcher: deepspeed, deepspeed: {hostfile: hostfile}}"),
            (dir_ / "s.yaml").string() +
                ":2:19: topology.ranks: topology.ranks is 4 but DeepSpeed's runner starts 2 "
                "process(es) from topology.deepspeed (allowed: 2, or leave ranks out)");
  EXPECT_EQ(error_of("{ranks: 2, launcher: local, deepspeed: {include: 'localhost:0'}}"),
            (dir_ / "s.yaml").string() +
                ":2:50: topology.deepspeed: the runner's options need topology.launcher: "
                "deepspeed (got local)");
  EXPECT_NE(error_of("{launcher: deepspeed, deepspeed: {num_gpus: -3}}")
                .find("topology.deepspeed.num_gpus"),
            std::string::npos);
}

// DeepSpeed's launch.py gives every rank the same command: one rank's own arguments, or a per-node
// launcher of the ranks' own, cannot be expressed under it; every rank's arguments can.
TEST_F(DeepspeedScenario, OneRanksOwnLaunchLineIsRefusedEveryRanksIsNot) {
  const auto load = [&](const std::string& faults) -> std::string {
    try {
      load_scenario(write(
          "a.yaml", "name: a\ntopology: {ranks: 2, launcher: deepspeed}\nfaults:\n" + faults));
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(load("  - args: [\"--requests\", \"6\"]\n    rank: 1\n"),
            (dir_ / "a.yaml").string() +
                ":5:11: faults[0].rank: one rank's own arguments need topology.launcher: local, "
                "mpirun or srun (DeepSpeed's launcher starts every rank with the same arguments); "
                "leave rank out to change every rank's command");
  EXPECT_EQ(load("  - args: [\"--tp\", \"2\"]\n"), "");
  EXPECT_NE(load("  - launcher: {devices: int}\n")
                .find("faults[0].launcher: a per-node launcher "
                      "fault needs topology.launcher: local"),
            std::string::npos);
}

}  // namespace
}  // namespace fl::harness
