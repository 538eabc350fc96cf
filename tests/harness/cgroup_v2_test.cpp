// cgroup v2 for memory_limit and cpu_quota beside v1: the files' formats on fake trees (a
// directory with cgroup.controllers stands for a v2 root, one without for a v1 root), and on a
// real cgroup2 filesystem this test mounts in a private directory (root only; skipped otherwise)
// what the kernel allows there: a group made, a process placed through cgroup.procs and seen in
// /proc/PID/cgroup, the group removed, and a controller it cannot offer refused by name.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.hpp"
#include "harness/faults/cgroup.hpp"

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void put(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

class FakeTree : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fl-cgroup-fake-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    put(root_ + "/cgroup.procs", "");
  }
  void TearDown() override { fs::remove_all(root_); }
  void make_v2(const std::string& controllers, const std::string& subtree) {
    put(root_ + "/cgroup.controllers", controllers + "\n");
    put(root_ + "/cgroup.subtree_control", subtree + "\n");
  }
  std::string root_;
};

TEST_F(FakeTree, ARootWithCgroupControllersIsV2AndOneWithoutIsV1) {
  EXPECT_EQ(cgroup_version(root_), CgroupVersion::kV1);
  make_v2("cpu memory", "cpu memory");
  EXPECT_EQ(cgroup_version(root_), CgroupVersion::kV2);
  EXPECT_EQ(cgroup_version("/nonexistent/cg"), CgroupVersion::kV1);
}

TEST_F(FakeTree, V2MemoryLimitWritesMemoryMaxAndNoSwap) {
  make_v2("cpu memory", "cpu memory");
  Cgroup g(root_, "FAULTLINE_CGROUP_ROOT", "/r/run-1", 2, "memory_limit on h", "memory");
  EXPECT_TRUE(g.v2());
  EXPECT_EQ(fs::path(g.path()).filename().string(), owner_tag() + ".run-1.rank2");
  put(g.path() + "/memory.swap.max", "max\n");  // the kernel has swap accounting
  limit_memory(g, 268435456);
  EXPECT_EQ(slurp(g.path() + "/memory.max"), "268435456");
  EXPECT_EQ(slurp(g.path() + "/memory.swap.max"), "0");
  EXPECT_FALSE(fs::exists(g.path() + "/memory.limit_in_bytes"));
  EXPECT_FALSE(fs::exists(g.path() + "/memory.swappiness"));
}

TEST_F(FakeTree, V2MemoryWithoutSwapAccountingWritesNoSwapFile) {
  make_v2("memory", "memory");
  Cgroup g(root_, "FAULTLINE_CGROUP_ROOT", "/r/run-1", 0, "memory_limit on h", "memory");
  limit_memory(g, 1048576);
  EXPECT_EQ(slurp(g.path() + "/memory.max"), "1048576");
  EXPECT_FALSE(fs::exists(g.path() + "/memory.swap.max"));
}

TEST_F(FakeTree, V1MemoryLimitKeepsItsFiles) {
  Cgroup g(root_, "FAULTLINE_CGROUP_ROOT", "/r/run-1", 0, "memory_limit on h", "memory");
  EXPECT_FALSE(g.v2());
  limit_memory(g, 1048576);
  EXPECT_EQ(slurp(g.path() + "/memory.limit_in_bytes"), "1048576");
  EXPECT_EQ(slurp(g.path() + "/memory.swappiness"), "0");
  EXPECT_FALSE(fs::exists(g.path() + "/memory.max"));
}

TEST_F(FakeTree, V2CpuQuotaIsOneCpuMaxLineAndLiftedAsMax) {
  make_v2("cpu", "cpu");
  Cgroup g(root_, "FAULTLINE_CPU_CGROUP_ROOT", "/r/run-1", 1, "cpu_quota on h", "cpu");
  set_cpu_quota(g, 25000, 100000);
  EXPECT_EQ(slurp(g.path() + "/cpu.max"), "25000 100000");
  set_cpu_quota(g, -1, 100000);
  EXPECT_EQ(slurp(g.path() + "/cpu.max"), "max 100000");
  EXPECT_FALSE(fs::exists(g.path() + "/cpu.cfs_quota_us"));
}

TEST_F(FakeTree, V1CpuQuotaWritesPeriodAndQuota) {
  Cgroup g(root_, "FAULTLINE_CPU_CGROUP_ROOT", "/r/run-1", 1, "cpu_quota on h", "cpu");
  set_cpu_quota(g, 5000, 100000);
  EXPECT_EQ(slurp(g.path() + "/cpu.cfs_quota_us"), "5000");
  EXPECT_EQ(slurp(g.path() + "/cpu.cfs_period_us"), "100000");
}

TEST_F(FakeTree, V2CpuStatCountsThrottledMicrosecondsAsNanoseconds) {
  make_v2("cpu", "cpu");
  Cgroup g(root_, "FAULTLINE_CPU_CGROUP_ROOT", "/r/run-1", 1, "cpu_quota on h", "cpu");
  // As a 6.x kernel writes it (nr_bursts and burst_usec after the throttling fields).
  put(g.path() + "/cpu.stat",
      "usage_usec 812345\nuser_usec 700000\nsystem_usec 112345\nnr_periods 57\n"
      "nr_throttled 41\nthrottled_usec 3921000\nnr_bursts 0\nburst_usec 0\n");
  EXPECT_EQ(
      cpu_stat(g),
      (nlohmann::json{{"nr_periods", 57}, {"nr_throttled", 41}, {"throttled_ns", 3921000000}}));
  // No cpu controller in the group: cpu.stat has the usage only.
  put(g.path() + "/cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
  EXPECT_EQ(cpu_stat(g),
            (nlohmann::json{{"nr_periods", -1}, {"nr_throttled", -1}, {"throttled_ns", -1}}));
}

TEST_F(FakeTree, V1CpuStatKeepsNanoseconds) {
  Cgroup g(root_, "FAULTLINE_CPU_CGROUP_ROOT", "/r/run-1", 1, "cpu_quota on h", "cpu");
  put(g.path() + "/cpu.stat", "nr_periods 5\nnr_throttled 2\nthrottled_time 123456\n");
  EXPECT_EQ(cpu_stat(g),
            (nlohmann::json{{"nr_periods", 5}, {"nr_throttled", 2}, {"throttled_ns", 123456}}));
}

TEST_F(FakeTree, V2MemoryCountersComeFromMemoryEventsCurrentAndPeak) {
  make_v2("memory", "memory");
  Cgroup g(root_, "FAULTLINE_CGROUP_ROOT", "/r/run-1", 2, "memory_limit on h", "memory");
  put(g.path() + "/memory.events", "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n");
  put(g.path() + "/memory.current", "262000640\n");
  put(g.path() + "/memory.peak", "268435456\n");
  EXPECT_EQ(memory_counters(g), (nlohmann::json{{"usage", 262000640},
                                                {"max_usage", 268435456},
                                                {"failcnt", 17},
                                                {"oom_kills", 1},
                                                {"under_oom", 0},
                                                {"cgroup_version", 2}}));
  fs::remove(g.path() + "/memory.peak");  // kernels before 5.19
  EXPECT_EQ(memory_counters(g)["max_usage"], -1);
}

TEST_F(FakeTree, V1MemoryCountersComeFromOomControl) {
  Cgroup g(root_, "FAULTLINE_CGROUP_ROOT", "/r/run-1", 2, "memory_limit on h", "memory");
  put(g.path() + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  put(g.path() + "/memory.usage_in_bytes", "1000\n");
  put(g.path() + "/memory.max_usage_in_bytes", "2000\n");
  put(g.path() + "/memory.failcnt", "3\n");
  EXPECT_EQ(memory_counters(g), (nlohmann::json{{"usage", 1000},
                                                {"max_usage", 2000},
                                                {"failcnt", 3},
                                                {"oom_kills", 2},
                                                {"under_oom", 0},
                                                {"cgroup_version", 1}}));
}

TEST(CgroupFormats, KeyedValueMatchesWholeKeysOnly) {
  const std::string events = "oom 4\noom_kill 1\noom_group_kill 0\n";
  EXPECT_EQ(keyed_value(events, "oom"), 4);
  EXPECT_EQ(keyed_value(events, "oom_kill"), 1);
  EXPECT_EQ(keyed_value(events, "kill"), -1);
  EXPECT_EQ(keyed_value("", "max"), -1);
  EXPECT_EQ(cpu_max_line(1000, 1000000), "1000 1000000");
  EXPECT_EQ(cpu_max_line(-1, 100000), "max 100000");
}

TEST_F(FakeTree, AV2RootThatDoesNotOfferTheControllerIsRefusedNamingIt) {
  make_v2("cpu", "cpu");
  try {
    check_cgroup_root(root_, "FAULTLINE_CGROUP_ROOT", "memory_limit", "memory");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "memory_limit: the cgroup v2 hierarchy at " + root_ +
                  " does not offer the memory controller (cgroup.controllers: 'cpu'; a controller "
                  "a cgroup v1 hierarchy holds is not available in v2); set FAULTLINE_CGROUP_ROOT "
                  "to a hierarchy that has it");
  }
}

TEST_F(FakeTree, AV2RootOfferingTheControllerHandsItDown) {
  make_v2("cpu memory", "cpu");
  check_cgroup_root(root_, "FAULTLINE_CGROUP_ROOT", "memory_limit", "memory");
  EXPECT_EQ(slurp(root_ + "/cgroup.subtree_control"), "+memory");
}

TEST(AutoRoot, ADirectoryWithoutCgroupFilesystemsFallsBackToTheV1Path) {
  EXPECT_EQ(auto_cgroup_root("memory", "/nonexistent"), "/nonexistent/memory");
}

// A cgroup2 filesystem of our own: the same unified hierarchy as the host's, mounted where
// nobody else looks, unmounted afterwards.
class RealCgroup2 : public testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting cgroup2 needs root";
    char tmpl[] = "/tmp/fl-cgroup2-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    if (::mount("none", dir_.c_str(), "cgroup2", 0, nullptr) != 0) {
      const int err = errno;
      ::rmdir(dir_.c_str());
      dir_.clear();
      GTEST_SKIP() << "cannot mount cgroup2 here: " << std::strerror(err);
    }
  }
  void TearDown() override {
    if (dir_.empty()) return;
    EXPECT_EQ(::umount2(dir_.c_str(), 0), 0) << std::strerror(errno);
    EXPECT_EQ(::rmdir(dir_.c_str()), 0) << std::strerror(errno);
  }
  std::string dir_;
};

TEST_F(RealCgroup2, AGroupTakesAProcessThroughCgroupProcsAndIsRemovedOnceItEnds) {
  EXPECT_EQ(cgroup_version(dir_), CgroupVersion::kV2);
  Cgroup g(dir_, "FAULTLINE_CGROUP_ROOT", "/r/run-v2", 3, "test");
  ASSERT_TRUE(g.v2());
  ASSERT_TRUE(fs::exists(g.path() + "/cgroup.procs"));
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  g.write("cgroup.procs", std::to_string(child));
  const std::string name = fs::path(g.path()).filename().string();
  EXPECT_EQ(cgroup_of(child, "memory", CgroupVersion::kV2), "/" + name);
  std::istringstream procs(g.read("cgroup.procs"));
  pid_t listed = 0;
  procs >> listed;
  EXPECT_EQ(listed, child);
  // The kernel's own cpu.stat of a v2 group, read as cpu_quota reads it: without the cpu
  // controller it has no throttling fields.
  const auto stat = cpu_stat(g);
  if (slurp(dir_ + "/cgroup.subtree_control").find("cpu") == std::string::npos) {
    EXPECT_EQ(stat["nr_periods"], -1);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(g.remove());
  EXPECT_FALSE(fs::exists(g.path()));
}

TEST_F(RealCgroup2, AMemoryLimitWhereV2HasTheControllerElseARefusalNamingIt) {
  const bool offered = slurp(dir_ + "/cgroup.controllers").find("memory") != std::string::npos;
  if (!offered) {
    try {
      Cgroup g(dir_, "FAULTLINE_CGROUP_ROOT", "/r/run-v2", 4, "memory_limit on h", "memory");
      g.remove();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("memory_limit on h: the cgroup v2 hierarchy at " + dir_ +
                                           " does not offer the memory controller"),
                std::string::npos)
          << e.what();
    }
    return;
  }
  // A v2 host (the GPU machine, a current distribution): the limit as the kernel reads it back.
  Cgroup g(dir_, "FAULTLINE_CGROUP_ROOT", "/r/run-v2", 4, "memory_limit on h", "memory");
  limit_memory(g, 64 << 20);
  EXPECT_EQ(g.read("memory.max"), "67108864\n");
  EXPECT_EQ(memory_counters(g)["oom_kills"], 0);
  EXPECT_TRUE(g.remove());
}

}  // namespace
}  // namespace fl::harness::faults
