// Issue 32, item 1: a results directory another user can write must not hand them the run. The
// results/suite directory is refused unless only root and this user can write it (or it is sticky
// like /tmp), or --allow-shared-results accepts it; the run directory is opened once right after
// mkdir and written through that descriptor; temporaries get fresh exclusive names, so a symlink
// planted at the old NAME.tmp is never followed. Cases that need another owner run as root and
// skip otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/private_dir.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/run/runner.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

std::string test_dir() {
  return test::fresh_test_dir("private-dir",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A directory `mode`, made now (0 for the owner: keep ours).
std::string make_dir(const std::string& path, mode_t mode, uid_t owner = 0) {
  fs::create_directories(path);
  if (owner != 0) {
    EXPECT_EQ(::chown(path.c_str(), owner, owner), 0);
  }
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

std::string expected(const std::string& results, const std::string& dir, uid_t owner, mode_t mode,
                     const std::string& problem) {
  return fmt::format(
      "--results {}: {} (owner uid {}, mode {:04o}) is {}; allowed: directories owned by root or "
      "by uid {} that no other user can write, or sticky ones like /tmp (another user could swap "
      "the run directory for their own); use a directory of your own, or --allow-shared-results "
      "to accept it",
      results, dir, owner, mode, problem, ::geteuid());
}

TEST(ResultsDirectory, WritableByOthersIsRefusedWithTheExactMessageUnlessSticky) {
  const std::string res = make_dir(test_dir() + "/res", 0777);
  EXPECT_EQ(refusal([&] { make_run_dir(res, "r", "tiny", false); }),
            expected(res, res, ::geteuid(), 0777,
                     "writable by its group and others without the sticky bit"));
  EXPECT_FALSE(fs::exists(res + "/r"));  // refused before anything was made in it
  // The same for a directory above it, and for group-writable.
  const std::string below = make_dir(res + "/below", 0755);
  EXPECT_EQ(refusal([&] { make_run_dir(below, "r", "tiny", false); }),
            expected(below, res, ::geteuid(), 0777,
                     "writable by its group and others without the sticky bit"));
  ASSERT_EQ(::chmod(res.c_str(), 0775), 0);
  EXPECT_EQ(
      refusal([&] { make_run_dir(below, "r", "tiny", false); }),
      expected(below, res, ::geteuid(), 0775, "writable by its group without the sticky bit"));
  ASSERT_EQ(::chmod(res.c_str(), 0757), 0);
  EXPECT_EQ(refusal([&] { make_run_dir(below, "r", "tiny", false); }),
            expected(below, res, ::geteuid(), 0757, "writable by others without the sticky bit"));
  // Sticky and world-writable, like /tmp: others cannot rename or remove what the harness makes.
  ASSERT_EQ(::chmod(res.c_str(), 01777), 0);
  const auto made = make_run_dir(res, "r", "tiny", false);
  EXPECT_EQ(made.warning, "");
  EXPECT_EQ(made.dir, res + "/r");
  struct stat st {};
  ASSERT_EQ(::stat(made.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST(ResultsDirectory, OwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to uid 65534";
  const std::string res = make_dir(test_dir() + "/res", 0755, kNobody);
  EXPECT_EQ(refusal([&] { make_run_dir(res, "r", "tiny", false); }),
            expected(res, res, kNobody, 0755, "owned by another user"));
  EXPECT_FALSE(fs::exists(res + "/r"));
}

TEST(ResultsDirectory, MissingPartsAreMadeThatOnlyTheirOwnerCanWrite) {
  const std::string res = test_dir() + "/a/b/runs";
  const mode_t old = ::umask(0);  // a umask that would leave create_directories' 0777 as it is
  const auto made = make_run_dir(res, "r", "tiny", false);
  ::umask(old);
  EXPECT_EQ(made.warning, "");
  for (const std::string& d : {res, fs::path(res).parent_path().string()}) {
    EXPECT_EQ(fs::status(d).permissions(), fs::perms(0755)) << d;
  }
}

TEST(ResultsDirectory, TheExplicitOptionAcceptsItWithTheReasonAsAWarning) {
  const std::string res = make_dir(test_dir() + "/res", 0777);
  const auto made = make_run_dir(res, "r", "tiny", true);
  EXPECT_EQ(made.warning, expected(res, res, ::geteuid(), 0777,
                                   "writable by its group and others without the sticky bit"));
  EXPECT_TRUE(fs::is_directory(res + "/r"));
}

TEST(ResultsDirectory, TheCliExitsTwoForRunAndSuiteAndTheOptionGetsPastTheCheck) {
  const std::string dir = test_dir();
  const std::string res = make_dir(dir + "/res", 0777);
  const std::string scenario = FAULTLINE_SOURCE_DIR "/scenarios/clean/clean-dp2-tp2.yaml";
  const std::string why = expected(res, res, ::geteuid(), 0777,
                                   "writable by its group and others without the sticky bit");
  auto r = test::run_process({FAULTLINE_CLI, "run", scenario, "--results", res, "-q"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "faultline: error: " + why + "\n");
  r = test::run_process({FAULTLINE_CLI, "suite",
                         FAULTLINE_SOURCE_DIR "/scenarios/suites/smoke.yaml", "--results", res});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("faultline: error: " + why + "\n"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(res));
  // With the option the run gets as far as loading: a scenario that does not exist is the error.
  r = test::run_process(
      {FAULTLINE_CLI, "run", dir + "/none.yaml", "--results", res, "--allow-shared-results"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.find("sticky"), std::string::npos) << r.output;
}

TEST(AgentRunDirectory, AnAgentRefusesARunDirectoryOthersCanWrite) {
  const std::string dir = make_dir(test_dir() + "/run", 0777);
  auto r = test::run_process(
      {FAULTLINE_CLI, "agent", "--control", "unix:/nonexistent", "--host", "h0", "--run-dir", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.output.find(fmt::format("faultline agent h0: --run-dir {}: {} (owner uid {}, mode "
                                "0777) is writable by its group and others without the sticky bit",
                                dir, dir, ::geteuid())),
      std::string::npos)
      << r.output;
}

TEST(WriteAtomic, ASymlinkPlantedAtTheOldTmpNameIsNotFollowed) {
  const std::string dir = test_dir();
  const std::string victim = dir + "/victim";
  write(victim, "precious\n");
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  fs::create_symlink(victim, dir + "/verdict.json.tmp");
  write_atomic(dir + "/verdict.json", "forged?\n");
  EXPECT_EQ(read(victim), "precious\n");
  EXPECT_EQ(read(dir + "/verdict.json"), "forged?\n");
  EXPECT_FALSE(fs::is_symlink(dir + "/verdict.json"));
  EXPECT_TRUE(fs::is_symlink(dir + "/verdict.json.tmp"));  // left alone
  // Nothing else is left behind: the directory holds the victim, the symlink and the file.
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  EXPECT_EQ(n, 3);
}

TEST(RunDirectory, FilesWrittenThroughItLandInTheDirectoryMkdirMadeAfterASwap) {
  const std::string res = make_dir(test_dir() + "/res", 0755);
  const auto made = make_run_dir(res, "r", "tiny", false);
  // Someone moves the run directory away and puts another one at its path.
  fs::rename(res + "/r", res + "/moved");
  fs::create_directory(res + "/r");
  made.fd.write_atomic("verdict.json", "{}\n");
  made.fd.mkdirs("ranks/rank0");
  EXPECT_EQ(read(res + "/moved/verdict.json"), "{}\n");
  EXPECT_TRUE(fs::is_directory(res + "/moved/ranks/rank0"));
  EXPECT_TRUE(fs::is_empty(res + "/r"));
}

TEST(RunDirectory, ASwapBetweenMkdirAndOpenIsRefused) {
  const std::string res = make_dir(test_dir() + "/res", 0755);
  set_run_dir_hook_for_tests([&](const std::string& dir) {
    fs::rename(dir, res + "/moved");
    fs::create_directory(dir);
    write(dir + "/verdict.json", "{\"outcome\": \"pass\"}\n");
    if (::geteuid() == 0) {
      EXPECT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0);
    }
    ::chmod(dir.c_str(), 0755);
  });
  const std::string e = refusal([&] { make_run_dir(res, "r", "tiny", false); });
  set_run_dir_hook_for_tests(nullptr);
  const uid_t owner = ::geteuid() == 0 ? kNobody : ::geteuid();
  EXPECT_EQ(e, fmt::format("{}/r: refused: not the run directory the harness just created (owner "
                           "uid {}, mode 0755, 1 entries; expected uid {}, no access for others, "
                           "empty): someone who can write {} replaced it",
                           res, owner, ::geteuid(), res));
  // A symlink put there is not followed either.
  set_run_dir_hook_for_tests([&](const std::string& dir) {
    fs::remove(dir);
    fs::create_symlink(res + "/moved", dir);
  });
  EXPECT_EQ(refusal([&] { make_run_dir(res, "s", "tiny", false); }),
            fmt::format("{}/s: cannot open the directory: it is a symlink (not followed) (someone "
                        "who can write {} replaced the run directory)",
                        res, res));
  set_run_dir_hook_for_tests(nullptr);
}

TEST(RunDirectory, ASymlinkInsideItIsNotFollowed) {
  const std::string dir = test_dir();
  const std::string elsewhere = make_dir(dir + "/elsewhere", 0755);
  const auto made = make_run_dir(dir + "/res", "r", "tiny", false);
  fs::create_directory_symlink(elsewhere, made.dir + "/ranks");
  EXPECT_EQ(refusal([&] { made.fd.mkdirs("ranks/rank0"); }),
            made.dir + "/ranks: cannot open the directory: it is a symlink (not followed)");
  fs::create_symlink(elsewhere + "/f", made.dir + "/scenario.yaml");
  made.fd.write_atomic("scenario.yaml", "x\n");  // replaces the symlink, never writes through it
  EXPECT_FALSE(fs::exists(elsewhere + "/f"));
  EXPECT_TRUE(fs::is_empty(elsewhere));
  EXPECT_EQ(read(made.dir + "/scenario.yaml"), "x\n");
}

TEST(PrivateTempDir, IsMadePerUserAndOnlyItsOwnerCanEnterIt) {
  const std::string tmp = make_dir(test_dir() + "/tmp", 01777);
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const std::string d = private_temp_dir("faultline-jit", "FAULTLINE_JIT_DIR");
  EXPECT_EQ(d, fmt::format("{}/faultline-jit-{}", tmp, ::geteuid()));
  EXPECT_EQ(fs::status(d).permissions(), fs::perms(0700));
  EXPECT_EQ(private_temp_dir("faultline-jit", "FAULTLINE_JIT_DIR"), d);  // and reused
  ::unsetenv("TMPDIR");
}

TEST(PrivateTempDir, OneAnotherUserMadeFirstIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to uid 65534";
  const std::string tmp = make_dir(test_dir() + "/tmp", 01777);
  const std::string planted = make_dir(fmt::format("{}/faultline-artifacts-0", tmp), 0777, kNobody);
  ::setenv("TMPDIR", tmp.c_str(), 1);
  EXPECT_EQ(refusal([] { private_temp_dir("faultline-artifacts", "FAULTLINE_ARTIFACT_CACHE"); }),
            planted +
                ": refused: it is owned by uid 65534, and must be a directory of uid 0 that only "
                "it can enter (another user may have made it to plant files this user would "
                "load); remove it, or set FAULTLINE_ARTIFACT_CACHE to a directory of your own");
  ::unsetenv("TMPDIR");
}

}  // namespace
}  // namespace fl::harness
