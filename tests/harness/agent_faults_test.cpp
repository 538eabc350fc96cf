// What the fault kinds do on a node (their handlers in harness/faults/KIND.cpp, applied by a
// faults::Node as an agent applies them), without root: every path must stay inside the run
// directory (absolute paths, `..` and links out are refused with the reason), a node touches only
// the cgroups, mounts and backups it made, damaged files are put back by FileRestore and by
// cleanup() when the harness never asked, and every request type has one handler.
#include <google/protobuf/any.pb.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/on_nodes.hpp"
#include "harness/proto/faultline.pb.h"
#include "tests/support/scratch.hpp"

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

// The agents' plugin directory in this process (FAULTLINE_PLUGIN_DIR is read once, so it is set
// before any test runs).
const std::string kPlugins = [] {
  const std::string d =
      fl::test::removed_at_exit(fs::temp_directory_path() /
                                ("fl-agent-plugins-" + std::to_string(::getpid())))
          .string();
  ::setenv("FAULTLINE_PLUGIN_DIR", d.c_str(), 1);
  return d;
}();

class AgentFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fl::test::removed_at_exit(
        fs::temp_directory_path() /
        ("fl-agent-faults-" + std::to_string(::getpid()) + "-" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(base_);
    dir_ = (base_ / "run").string();
    fs::create_directories(dir_ + "/checkpoints/step_4");
    write(dir_ + "/checkpoints/step_4/shard_r0.bin", std::string(256, 'a'));
    write(dir_ + "/checkpoints/step_4/shard_r1.bin", std::string(256, 'b'));
    fs::create_directories(base_ / "outside");
    write((base_ / "outside" / "secret.bin").string(), "keep");
  }
  void TearDown() override { fs::remove_all(base_); }

  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Applies one request as the agent does (packed).
  static nlohmann::json apply(Node& a, const google::protobuf::Message& f) {
    google::protobuf::Any any;
    any.PackFrom(f);
    return a.apply(any);
  }
  // The error text of applying `f`, "" when it was applied.
  static std::string refusal(Node& a, const google::protobuf::Message& f) {
    try {
      apply(a, f);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path base_;
  std::string dir_;
};

TEST_F(AgentFaultsTest, PathsOutsideTheRunDirectoryAreRefusedWithTheReason) {
  EXPECT_EQ(run_path(dir_, "checkpoints", "disk_full"),
            fs::weakly_canonical(dir_).string() + "/checkpoints");
  EXPECT_EQ(run_path(dir_, "not/yet/there", "disk_full"),
            fs::weakly_canonical(dir_).string() + "/not/yet/there");
  auto why = [&](const std::string& rel) {
    try {
      run_path(dir_, rel, "disk_full");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(why("/etc"),
            "disk_full: '/etc' is absolute; the agent acts only inside the run directory " + dir_);
  EXPECT_EQ(why("checkpoints/../../outside"),
            "disk_full: 'checkpoints/../../outside' leaves the run directory " + dir_ +
                " ('..'); refused");
  EXPECT_EQ(why(""), "disk_full: an empty path (give one relative to the run directory)");
  EXPECT_NE(why(".").find("outside the run directory"), std::string::npos) << why(".");
  // A link in the run directory that points out of it.
  fs::create_directory_symlink(base_ / "outside", dir_ + "/escape");
  EXPECT_EQ(why("escape/secret.bin"), "disk_full: 'escape/secret.bin' resolves to " +
                                          (base_ / "outside" / "secret.bin").string() +
                                          ", outside the run directory " + dir_ + "; refused");
}

TEST_F(AgentFaultsTest, MountsAndCgroupsOnlyOfItsOwn) {
  Node a(dir_, "h1", "s3cret");
  pb::DiskFull f;
  f.set_path("/tmp");
  f.set_bytes(4096);
  EXPECT_EQ(refusal(a, f),
            "disk_full: '/tmp' is absolute; the agent acts only inside the run directory " + dir_);
  f.set_path("../outside");
  EXPECT_NE(refusal(a, f).find("leaves the run directory"), std::string::npos);
  f.set_path("checkpoints");
  f.set_bytes(0);
  EXPECT_EQ(refusal(a, f), "disk_full: size 0 is not above 0");

  pb::DiskFree free;
  free.set_path("checkpoints");
  EXPECT_EQ(refusal(a, free),
            "disk_free: 'checkpoints' is not a mount this agent made on h1; refused");

  pb::MemoryStatus st;
  st.set_rank(2);
  EXPECT_EQ(refusal(a, st),
            "memory_status: rank 2 has no memory cgroup of this agent on h1 (refused: the agent "
            "touches only the groups it made)");
  pb::MemoryRelease rel;
  rel.set_rank(0);
  EXPECT_NE(refusal(a, rel).find("memory_release: rank 0 has no memory cgroup"), std::string::npos);
  pb::MemoryLimit lim;
  lim.set_rank(1);
  lim.set_bytes(4096);
  EXPECT_EQ(refusal(a, lim),
            "memory_limit: 4096 bytes is below 1 MiB (a process cannot start in it)");
  lim.set_rank(-1);
  EXPECT_EQ(refusal(a, lim), "memory_limit: rank -1 is not a rank (0 or more)");
  EXPECT_TRUE(a.cleanup().empty());  // nothing was made, nothing to undo
}

TEST_F(AgentFaultsTest, DamagesTheRunsFilesAndPutsThemBack) {
  const std::string r0 = dir_ + "/checkpoints/step_4/shard_r0.bin";
  const std::string r1 = dir_ + "/checkpoints/step_4/shard_r1.bin";
  Node a(dir_, "h1", "s3cret");
  pb::FileDamage f;
  auto* d = &f;
  d->set_glob("checkpoints/step_*/shard_r1*.bin");
  d->set_action("corrupt");
  d->set_bytes(16);
  d->set_seed(7);
  d->set_tag("f1");
  const auto report = apply(a, f);
  ASSERT_EQ(report["files"].size(), 1u) << report.dump();
  EXPECT_EQ(report["files"][0]["path"], "checkpoints/step_4/shard_r1.bin");
  EXPECT_EQ(report["host"], "h1");
  EXPECT_NE(read(r1), std::string(256, 'b'));
  EXPECT_EQ(read(r0), std::string(256, 'a'));  // not matched, not touched

  // The same damage on another agent's copy of the run directory changes the same bytes.
  const std::string damaged = read(r1);
  write(r1, std::string(256, 'b'));
  Node again(dir_, "h2", "s3cret");
  d->set_tag("f2");
  apply(again, f);
  EXPECT_EQ(read(r1), damaged);
  again.cleanup();
  EXPECT_EQ(read(r1), std::string(256, 'b'));
  write(r1, damaged);

  pb::FileRestore restore;
  restore.set_tag("f1");
  const auto back = apply(a, restore);
  EXPECT_EQ(back["restored"], nlohmann::json({"checkpoints/step_4/shard_r1.bin"}));
  EXPECT_EQ(read(r1), std::string(256, 'b'));
  EXPECT_EQ(refusal(a, restore), "file_restore: no damage 'f1' by this agent on h1; refused");

  // Deleted and never restored by the harness: the agent's clean-up puts it back.
  d->set_glob("checkpoints/step_4/shard_r0.bin");
  d->set_action("delete");
  d->set_tag("f3");
  apply(a, f);
  EXPECT_FALSE(fs::exists(r0));
  const auto lines = a.cleanup();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("file_restore"), std::string::npos) << lines[0];
  EXPECT_EQ(read(r0), std::string(256, 'a'));
}

TEST_F(AgentFaultsTest, FileDamageStaysInTheRunDirectory) {
  Node a(dir_, "h1", "s3cret");
  pb::FileDamage f;
  auto* d = &f;
  d->set_action("delete");
  d->set_bytes(1);
  d->set_tag("t1");
  d->set_glob("../outside/*");
  EXPECT_NE(refusal(a, f).find("leaves the run directory"), std::string::npos);
  d->set_glob(base_.string() + "/outside/secret.bin");
  EXPECT_NE(refusal(a, f).find("is absolute"), std::string::npos);
  fs::create_directory_symlink(base_ / "outside", dir_ + "/escape");
  d->set_glob("escape/*");  // through a link out of the run directory
  EXPECT_EQ(refusal(a, f), "file_damage: 'escape/*' resolves to " + (base_ / "outside").string() +
                               "/*, outside the run directory " + dir_ + "; refused");
  d->set_glob("nothing/*");
  EXPECT_EQ(refusal(a, f), "no file in the run directory matches 'nothing/*' (on host h1)");
  EXPECT_EQ(read((base_ / "outside" / "secret.bin").string()), "keep");
  d->set_glob("checkpoints/*/*");
  d->set_tag("../x");
  EXPECT_EQ(refusal(a, f), "file_damage: tag '../x' is not 1-32 letters or digits");
  d->set_tag("t1");
  d->set_action("shred");
  EXPECT_EQ(refusal(a, f), "file_damage: action 'shred' (allowed: delete, truncate, corrupt)");
}

TEST_F(AgentFaultsTest, CpuShmAndHideRequestsAreCheckedWithTheKeyAndHost) {
  Node a(dir_, "h1", "s3cret");
  pb::CpuQuota cpu;
  auto* q = &cpu;
  q->set_rank(-1);
  q->set_quota_us(10000);
  q->set_period_us(100000);
  EXPECT_EQ(refusal(a, cpu), "cpu_quota: rank -1 is not a rank (0 or more)");
  q->set_rank(1);
  q->set_period_us(10);
  EXPECT_EQ(refusal(a, cpu),
            "cpu_quota: period 10 us is not within 1000-1000000 (the kernel's range)");
  q->set_period_us(100000);
  q->set_quota_us(5);
  EXPECT_EQ(refusal(a, cpu),
            "cpu_quota: quota 5 us is below 1000 (the kernel's least; -1: no limit)");
  pb::CpuRelease cpu_rel;
  cpu_rel.set_rank(2);
  EXPECT_EQ(refusal(a, cpu_rel),
            "cpu_release: rank 2 has no cpu cgroup of this agent on h1 (refused: the agent "
            "touches only the groups it made)");

  pb::ShmMount shm;
  shm.set_bytes(100);
  EXPECT_EQ(refusal(a, shm), "shm_mount: 100 bytes is below one page (4096 or more)");
  pb::ShmRelease shm_rel;
  EXPECT_EQ(refusal(a, shm_rel), "shm_release: no /dev/shm of this agent on h1; refused");

  pb::HidePlugin hide;
  hide.set_rank(-2);
  hide.set_library("libfl_a.so");
  EXPECT_EQ(refusal(a, hide), "hide_plugin: rank -2 is not a rank (0 or more)");
  hide.set_rank(1);
  hide.set_library("../../outside/secret.bin");
  EXPECT_EQ(refusal(a, hide),
            "hide on h1: library '../../outside/secret.bin' is not a file name of the plugin "
            "directory");
  pb::UnhidePlugin unhide;
  unhide.set_rank(1);
  unhide.set_library("libfl_a.so");
  EXPECT_EQ(refusal(a, unhide),
            "unhide_plugin: 'libfl_a.so' was not hidden from rank 1 by this agent on h1; refused");
  EXPECT_TRUE(a.cleanup().empty());
}

// hide through an agent: the rank's plugin directory links the host's plugins less the library,
// the link comes back when healed, and cleanup() puts back what the harness never healed.
TEST_F(AgentFaultsTest, HidesALibraryFromOneRankAndPutsItBack) {
  const std::string plugins = kPlugins;
  fs::create_directories(plugins);
  for (const char* lib : {"libfl_a.so", "libfl_b.so"}) write(plugins + "/" + lib, "elf");
  const std::string links = fs::weakly_canonical(dir_).string() + "/ranks/rank1/plugins";
  {
    Node a(dir_, "h1", "s3cret");
    pb::HidePlugin hide;
    hide.set_rank(1);
    hide.set_library("libfl_nothing.so");
    EXPECT_EQ(refusal(a, hide),
              "hide on h1: no library 'libfl_nothing.so' in the plugin directory " + plugins +
                  " (there: libfl_a.so, libfl_b.so)");
    EXPECT_FALSE(fs::exists(links));
    hide.set_library("libfl_a.so");
    const auto r = apply(a, hide);
    EXPECT_EQ(r["dir"], links);
    EXPECT_EQ(r["host"], "h1");
    EXPECT_EQ(r["libraries"], nlohmann::json::array({"libfl_a.so", "libfl_b.so"}));
    EXPECT_FALSE(fs::exists(links + "/libfl_a.so"));
    EXPECT_EQ(fs::read_symlink(links + "/libfl_b.so"), fs::path(plugins) / "libfl_b.so");
    EXPECT_FALSE(fs::exists(dir_ + "/ranks/rank0/plugins"));  // only the rank it was hidden from

    pb::UnhidePlugin unhide;
    unhide.set_rank(1);
    unhide.set_library("libfl_a.so");
    EXPECT_EQ(apply(a, unhide)["restored"], true);
    EXPECT_EQ(fs::read_symlink(links + "/libfl_a.so"), fs::path(plugins) / "libfl_a.so");
    EXPECT_NE(refusal(a, unhide).find("was not hidden from rank 1"), std::string::npos);

    apply(a, hide);  // hidden again, never healed by the harness: the agent's cleanup does it
    EXPECT_FALSE(fs::exists(links + "/libfl_a.so"));
  }
  EXPECT_TRUE(fs::is_symlink(links + "/libfl_a.so"));
  fs::remove_all(plugins);
}

// hide on a node whose other ranks load from directories of their own (this machine: every rank):
// also_link gives each of them a link to every library, made once; a bad rank there is refused
// before anything is made.
TEST_F(AgentFaultsTest, HideLinksTheNodesOtherRanksToEveryLibrary) {
  const std::string plugins = kPlugins;
  fs::create_directories(plugins);
  for (const char* lib : {"libfl_a.so", "libfl_b.so"}) write(plugins + "/" + lib, "elf");
  const std::string ranks = fs::weakly_canonical(dir_).string() + "/ranks/rank";
  Node a(dir_, "h1", "s3cret");
  pb::HidePlugin hide;
  hide.set_rank(1);
  hide.set_library("libfl_a.so");
  hide.add_also_link(-1);
  EXPECT_EQ(refusal(a, hide), "hide_plugin: rank -1 is not a rank (0 or more)");
  EXPECT_FALSE(fs::exists(ranks + "1/plugins"));
  hide.clear_also_link();
  hide.add_also_link(0);
  hide.add_also_link(2);
  apply(a, hide);
  EXPECT_FALSE(fs::exists(ranks + "1/plugins/libfl_a.so"));
  for (const char* other : {"0", "2"}) {
    for (const char* lib : {"libfl_a.so", "libfl_b.so"}) {
      EXPECT_EQ(fs::read_symlink(ranks + other + "/plugins/" + lib), fs::path(plugins) / lib)
          << other << " " << lib;
    }
  }
  EXPECT_FALSE(fs::exists(ranks + "3/plugins"));
  a.cleanup();
  fs::remove_all(plugins);
}

// network's requests on an agent's host: every word that reaches iptables or tc is checked before
// any tool runs (a chain or device name, an IPv4 address, reject or drop), and a host has no
// simulated node namespaces.
TEST_F(AgentFaultsTest, NetworkRequestsAreCheckedBeforeAnyToolRuns) {
  Node a(dir_, "h1", "s3cret");
  pb::NetworkCut cut;
  cut.set_netns(-1);
  cut.set_chain("-F");
  cut.set_action("drop");
  EXPECT_EQ(refusal(a, cut), "network_cut: chain '-F' is not a name (letters, digits, -, _, .)");
  cut.set_chain("FAULTLINE");
  cut.set_action("accept");
  EXPECT_EQ(refusal(a, cut), "network_cut: action 'accept' (allowed: reject, drop)");
  cut.set_action("reject");
  cut.add_peers("10.0.0.2");
  cut.add_peers("10.0.0.3; reboot");
  EXPECT_EQ(refusal(a, cut), "network_cut: '10.0.0.3; reboot' is not an IPv4 address");
  cut.clear_peers();
  cut.set_store("10.0.0.1");
  cut.set_store_port(70000);
  EXPECT_EQ(refusal(a, cut), "network_cut: 70000 is not a port (1-65535)");
  pb::NetworkLimit limit;
  limit.set_netns(-1);
  limit.set_device("eth0 root");
  limit.set_rate("1mbit");
  EXPECT_EQ(refusal(a, limit),
            "network_limit: device 'eth0 root' is not a name (letters, digits, -, _, .)");
  limit.set_device("eth0");
  limit.set_netns(2);
  EXPECT_EQ(refusal(a, limit),
            "network: host h1 has no simulated node namespaces (netns 2); refused");
  pb::NetworkHeal heal;
  heal.set_netns(-1);
  heal.set_device("../x");
  EXPECT_EQ(refusal(a, heal),
            "network_heal: device '../x' is not a name (letters, digits, -, _, .)");
}

// Every request type is handled by one kind, registered with it (FaultKind::node_handlers).
TEST(NodeHandlers, EachRequestTypeHasOneHandlerOfItsKind) {
  const auto types = node_request_types();
  EXPECT_EQ(std::set<std::string>(types.begin(), types.end()).size(), types.size())
      << "a request type handled twice";
  for (const char* t :
       {"faultline.v1.MemoryLimit", "faultline.v1.DiskFull", "faultline.v1.FileDamage",
        "faultline.v1.CpuQuota", "faultline.v1.ShmMount", "faultline.v1.HidePlugin",
        "faultline.v1.SignalRank", "faultline.v1.NetworkCut", "faultline.v1.NetworkLimit",
        "faultline.v1.NetworkHeal"}) {
    ASSERT_NE(node_handler(t), nullptr) << t;
    EXPECT_EQ(node_handler(t)->type(), t);
  }
  EXPECT_EQ(node_handler("faultline.v1.Event"), nullptr);
  EXPECT_EQ(request_name("type.googleapis.com/faultline.v1.DiskFull"), "disk_full");
  EXPECT_EQ(request_name("faultline.v1.UnhidePlugin"), "unhide_plugin");
}

// A request no kind handles (another message, or none at all) is refused naming its type and the
// types there are; nothing is done.
TEST_F(AgentFaultsTest, AnUnknownRequestTypeIsRefusedNamingIt) {
  Node a(dir_, "h1", "s3cret");
  const auto types = node_request_types();
  std::string known;
  for (const auto& t : types) known += (known.empty() ? "" : ", ") + t;
  pb::Event event;
  EXPECT_EQ(refusal(a, event),
            "no fault kind handles the request 'type.googleapis.com/faultline.v1.Event' on host h1 "
            "(a request is one of the kinds' messages in faultline.proto: " +
                known + ")");
  try {
    a.apply(google::protobuf::Any());
    ADD_FAILURE() << "an empty request was applied";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("no fault kind handles the request '(none)' on host h1", 0), 0u)
        << e.what();
  }
  EXPECT_TRUE(a.cleanup().empty());
}

}  // namespace
}  // namespace fl::harness::faults
