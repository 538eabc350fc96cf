// What killed runs leave outside their run directories, swept only once the owner is gone
// (issue 32, item 5; harness/faults/residue.hpp). Fake hierarchies in a test directory: a
// directory of empty directories stands for a cgroup v1 root.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "harness/faults/cgroup.hpp"
#include "harness/faults/residue.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;

class Residue_ : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fl::test::fresh_test_dir(
        "residue", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "memory");
    fs::create_directories(dir_ / "shm");
    fs::create_directories(dir_ / "tmp");
    dirs_.tmp = (dir_ / "tmp").string();
    dirs_.cgroup_roots = {(dir_ / "memory").string()};
    dirs_.shm = (dir_ / "shm").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string group(const std::string& name) {
    fs::create_directories(dir_ / "memory" / name);
    return (dir_ / "memory" / name).string();
  }
  std::string file(const std::string& name, int age_s) {
    const auto p = (dir_ / "shm" / name).string();
    std::ofstream(p) << "x";
    struct timeval tv[2] = {{::time(nullptr) - age_s, 0}, {::time(nullptr) - age_s, 0}};
    ::utimes(p.c_str(), tv);
    return p;
  }
  static std::vector<std::string> paths(const std::vector<Residue>& found) {
    std::vector<std::string> out;
    for (const auto& r : found) out.push_back(r.path);
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
  ResidueDirs dirs_;
};

// A pid no process has (above the kernel's pid_max of 4194304).
constexpr long kDeadPid = 99999999;

TEST_F(Residue_, GroupsOfGoneOwnersAreSweptAndLiveOnesKept) {
  const std::string own = owner_tag();  // faultline.<this pid>-<its start>
  const std::string dead = group(fmt::format("faultline.{}-5.run1.rank0", kDeadPid));
  const std::string live = group(own + ".run2.rank1");
  // This pid with another start time: the owner was a process that had this pid before.
  const std::string reused = group(fmt::format("faultline.{}-1.run3.rank0", ::getpid()));
  const std::string old_live = group(fmt::format("faultline.{}.run4.rank0", ::getpid()));
  const std::string old_dead = group(fmt::format("faultline.{}.run5.rank0", kDeadPid));
  const std::string other = group("someone-else");
  std::vector<std::string> stale = {dead, old_dead, reused};
  std::sort(stale.begin(), stale.end());
  auto found = sweep_residue(dirs_, /*dry_run=*/true);
  EXPECT_EQ(paths(found), stale);
  for (const auto& p : {dead, reused, old_dead}) EXPECT_TRUE(fs::exists(p)) << "dry run removed";
  found = sweep_residue(dirs_, /*dry_run=*/false);
  EXPECT_EQ(paths(found), stale);
  for (const auto& r : found) {
    EXPECT_EQ(r.kind, "cgroup");
    EXPECT_EQ(r.error, "");
    EXPECT_FALSE(fs::exists(r.path));
  }
  for (const auto& p : {live, old_live, other}) EXPECT_TRUE(fs::exists(p)) << p;
  const auto j = residue_json(found, false);
  EXPECT_EQ(j["found"], 3);
  EXPECT_EQ(j["left"], 0);
  EXPECT_EQ(found[0].owner.rfind("pid ", 0), 0u);
  EXPECT_EQ(residue_json({{"cgroup", dead, "pid 1 is gone", "EBUSY"}}, false)["left"], 1);
}

TEST_F(Residue_, OldArenasAndUnmappedOldSegmentsAreSwept) {
  const std::string arena = file(fmt::format("faultline.{}-7.run.rank1.arena", kDeadPid), 0);
  const std::string live_arena = file(owner_tag() + ".run.rank1.arena", 0);
  const std::string stale = file("faultline-shm-00ab-0", 120);
  const std::string fresh = file("faultline-shm-00ab-1", 0);  // its peers may map it any moment
  const std::string mapped = file("faultline-shm-00ab-2", 120);
  const std::string other = file("not-faultline", 120);
  const int fd = ::open(mapped.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, 1, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(m, MAP_FAILED);
  const auto found = sweep_residue(dirs_, /*dry_run=*/false);
  ::munmap(m, 1);
  EXPECT_EQ(paths(found), (std::vector<std::string>{stale, arena}));
  for (const auto& p : {live_arena, fresh, mapped, other}) EXPECT_TRUE(fs::exists(p)) << p;
  for (const auto& p : {arena, stale}) EXPECT_FALSE(fs::exists(p)) << p;
}

// A unix socket bound at `path` (a live listener's), or -1 (the failure printed).
int bind_unix(const std::string& path) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (s < 0 || path.size() >= sizeof(a.sun_path)) {
    ADD_FAILURE() << "cannot make a socket at " << path;
    return -1;
  }
  std::strcpy(a.sun_path, path.c_str());
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ADD_FAILURE() << "bind " << path << ": " << std::strerror(errno);
    ::close(s);
    return -1;
  }
  return s;
}

// An agent killed outright leaves the private directory of its relay socket behind; one whose
// socket is still bound (a live agent) or that is new is kept.
TEST_F(Residue_, RelayDirectoriesWhoseSocketNobodyHoldsAreSwept) {
  auto relay_dir = [&](const std::string& name, int age_s) {
    const fs::path d = fs::path(dirs_.tmp) / name;
    fs::create_directories(d);
    std::ofstream(d / "relay.sock") << "";  // a socket file left by a dead listener
    struct timeval tv[2] = {{::time(nullptr) - age_s, 0}, {::time(nullptr) - age_s, 0}};
    ::utimes(d.c_str(), tv);
    return d.string();
  };
  // A socket path must fit in sun_path (108 bytes): this test's temp root is short.
  char root[] = "/tmp/flres-XXXXXX";
  ASSERT_NE(::mkdtemp(root), nullptr);
  fl::test::removed_at_exit(root);
  dirs_.tmp = root;
  const std::string dead = relay_dir("faultline-relay-dead01", 120);
  const std::string fresh = relay_dir("faultline-relay-new001", 0);
  const std::string live = (fs::path(root) / "faultline-relay-live01").string();
  fs::create_directories(live);
  const int s = bind_unix(live + "/relay.sock");
  ASSERT_GE(s, 0);
  struct timeval tv[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  ::utimes(live.c_str(), tv);
  const auto found = sweep_residue(dirs_, /*dry_run=*/false);
  ::close(s);
  EXPECT_EQ(paths(found), (std::vector<std::string>{dead}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "relay");
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(root);
}

// A harness killed outright leaves the short link of a control socket whose run path was too long
// (base/private_dir.hpp ShortLinkDir): swept once nobody holds the socket bound through it, the
// link removed and not followed (the run directory and its files stay); one bound through its link
// (a live run) is kept.
TEST_F(Residue_, ControlLinkDirectoriesAreSweptWithoutTouchingTheRunDirectory) {
  char root[] = "/tmp/flres-XXXXXX";
  ASSERT_NE(::mkdtemp(root), nullptr);
  fl::test::removed_at_exit(root);
  dirs_.tmp = root;
  auto link_dir = [&](const std::string& name) {
    const fs::path run = fs::path(root) / ("run-" + name);
    fs::create_directories(run);
    std::ofstream(run / "verdict.json") << "{}";
    const fs::path d = fs::path(root) / ("faultline-control-" + name);
    fs::create_directories(d);
    fs::create_directory_symlink(run, d / "run");
    return std::make_pair(d.string(), run.string());
  };
  const auto [dead, dead_run] = link_dir("dead01");
  const auto [live, live_run] = link_dir("live01");
  const int s = bind_unix(live + "/run/control.sock");
  ASSERT_GE(s, 0);
  EXPECT_TRUE(fs::exists(live_run + "/control.sock")) << "bound through the link, into the run";
  std::ofstream(dead_run + "/control.sock") << "";  // left by the killed harness
  for (const auto& d : {dead, live}) {
    struct timeval tv[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
    ::utimes(d.c_str(), tv);
  }
  const auto found = sweep_residue(dirs_, /*dry_run=*/false);
  ::close(s);
  EXPECT_EQ(paths(found), (std::vector<std::string>{dead}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "control");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dead)));
  EXPECT_TRUE(fs::exists(dead_run + "/verdict.json")) << "the sweep followed the link";
  EXPECT_TRUE(fs::exists(live + "/run"));
  fs::remove_all(root);
}

TEST_F(Residue_, AnOwnerIsAliveOnlyWhileItsPidHasItsStartTime) {
  EXPECT_GT(process_start_ticks(::getpid()), 0u);
  EXPECT_EQ(process_start_ticks(static_cast<pid_t>(kDeadPid)), 0u);
  EXPECT_TRUE(owner_alive(owner_tag() + ".x"));
  EXPECT_FALSE(owner_alive(fmt::format("faultline.{}-1.x", kDeadPid)));
  EXPECT_TRUE(owner_alive("not-ours"));
}

}  // namespace
}  // namespace fl::harness::faults
