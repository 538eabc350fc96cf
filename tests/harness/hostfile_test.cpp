// topology.hostfile: the parser of Open MPI-style hostfiles and what a scenario with one loads to
// (the same hosts, addresses and checks as topology.hosts; docs/cluster.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness/model/scenario.hpp"
#include "harness/process/hosts.hpp"
#include "harness/scenario/hostfile.hpp"
#include "tests/support/scenario_files.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string parse_error(const std::string& text) {
  try {
    parse_hostfile_text("hf", text);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(Hostfile, ReadsHostsSlotsAddressesAndSkipsComments) {
  const auto h = parse_hostfile_text("hf",
                                     "# the cluster\n"
                                     "\n"
                                     "node1 slots=4\n"
                                     "   node2=10.0.0.12   slots=4 max_slots=8  # rack 2\n"
                                     "node3=fd00::3 max-slots=2\n"
                                     "node4\n");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].name, "node1");
  EXPECT_EQ(h[0].address, "");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[0].line, 3);
  EXPECT_EQ(h[1].name, "node2");
  EXPECT_EQ(h[1].address, "10.0.0.12");
  EXPECT_EQ(h[1].max_slots, 8);
  EXPECT_EQ(h[1].line, 4);
  EXPECT_EQ(h[2].address, "fd00::3");
  EXPECT_EQ(h[2].max_slots, 2);
  EXPECT_EQ(h[2].slots, 0);
  EXPECT_EQ(h[3].name, "node4");
  EXPECT_EQ(h[3].slots, 0);
}

TEST(Hostfile, ErrorsNameTheLineAndWhatIsAllowed) {
  const struct {
    const char* text;
    const char* want;
  } cases[] = {
      {"a\nb;reboot slots=1\n", "hf:2: 'b;reboot' is not a host name"},
      {"a=10.0.0.x\n", "hf:1: '10.0.0.x' is not an IPv4 or IPv6 address"},
      {"a cpus=4\n", "hf:1: 'cpus=4' after host a is not slots=N or max_slots=N"},
      {"a slots\n", "hf:1: 'slots' after host a is not slots=N or max_slots=N"},
      {"a slots=0\n", "hf:1: slots='0' is not a positive whole number"},
      {"a slots=4x\n", "hf:1: slots='4x' is not a positive whole number"},
      {"a slots=2 slots=3\n", "hf:1: slots is given twice for host a"},
      {"a slots=8 max_slots=4\n", "hf:1: host a has slots=8 above max_slots=4"},
      {"a\n# b\nb\na slots=2\n", "hf:4: host a is listed twice (first on line 1"},
      {"# nothing\n\n", "hf:2: the hostfile lists no host"},
  };
  for (const auto& c : cases) {
    const std::string e = parse_error(c.text);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.text << "\n got: " << e;
    EXPECT_NE(e.find("allowed: one host per line, NAME or NAME=ADDRESS"), std::string::npos) << e;
  }
}

class HostfileScenario : public test::ScenarioFiles {
 protected:
  HostfileScenario() : ScenarioFiles("hostfile") {}
  void SetUp() override {
    ScenarioFiles::SetUp();
    fs::create_directories(dir_ / "hosts");
  }
};

TEST_F(HostfileScenario, LoadsRelativeToTheScenarioFile) {
  write("hosts/two", "h0=10.201.1.1 slots=2\nh1=10.201.1.2 slots=2\n");
  const Scenario s = load_scenario(
      write("s.yaml", "name: s\ntopology: {ranks: 4, launcher: mpirun, hostfile: hosts/two}\n"));
  EXPECT_EQ(s.topo.hosts, (std::vector<std::string>{"h0", "h1"}));
  EXPECT_EQ(s.topo.host_addrs, (std::vector<std::string>{"10.201.1.1", "10.201.1.2"}));
  EXPECT_EQ(s.topo.nodes, 2);
  // The resolved scenario (RUN_DIR/scenario.yaml) names the file absolutely.
  EXPECT_EQ(s.resolved["topology"]["hostfile"].as<std::string>(), (dir_ / "hosts/two").string());
  // mpirun places the ranks as with topology.hosts.
  EXPECT_EQ(mpirun_host_options(s), (std::vector<std::string>{"--host", "h0:2,h1:2"}));
  EXPECT_EQ(appfile_host_option(s, 3), " --host h1");

  // The preparation run is loaded from the run directory: it gets the absolute path too.
  const Scenario p =
      load_scenario(write("p.yaml",
                          "name: p\ntopology: {ranks: 2, launcher: mpirun, hostfile: hosts/two}\n"
                          "prepare: {workload: {steps: 1}}\n"));
  EXPECT_NE(p.side_runs.prepare_yaml.find("hostfile: " + (dir_ / "hosts/two").string()),
            std::string::npos)
      << p.side_runs.prepare_yaml;
}

TEST_F(HostfileScenario, RefusesWhatTopologyHostsRefuses) {
  write("two", "a\nb\n");
  EXPECT_NE(error_of("{ranks: 2, launcher: mpirun, hosts: [a, b], hostfile: two}")
                .find("topology.hosts and topology.hostfile are both set (allowed: exactly one"),
            std::string::npos);
  EXPECT_NE(error_of("{ranks: 2, hostfile: two}")
                .find("topology.launcher: topology.hostfile needs launcher mpirun (got local"),
            std::string::npos);
  EXPECT_NE(error_of("{ranks: 3, launcher: mpirun, hostfile: two}")
                .find("3 ranks do not spread evenly over 2 hosts"),
            std::string::npos);
  EXPECT_NE(error_of("{ranks: 4, nodes: 4, launcher: mpirun, hostfile: two}")
                .find("topology.nodes is 4 but topology.hostfile lists 2 hosts"),
            std::string::npos);
}

TEST_F(HostfileScenario, ErrorsNameTheScenarioKeyAndTheHostfileLine) {
  const std::string hf = write("bad", "a slots=2\nb slots=two\n");
  const std::string e = error_of("{ranks: 2, launcher: mpirun, hostfile: bad}");
  EXPECT_NE(e.find("s.yaml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("topology.hostfile: " + hf + ":2: slots='two'"), std::string::npos) << e;

  const std::string missing = error_of("{ranks: 2, launcher: mpirun, hostfile: nowhere}");
  EXPECT_NE(missing.find((dir_ / "nowhere").string() + ": cannot read the hostfile"),
            std::string::npos)
      << missing;

  const std::string few = write("few", "a slots=4\nb slots=1\n");
  const std::string slots = error_of("{ranks: 4, launcher: mpirun, hostfile: few}");
  EXPECT_NE(slots.find(few + ":2: host b has slots=1 but gets 2 of the 4 ranks"), std::string::npos)
      << slots;
}

}  // namespace
}  // namespace fl::harness
