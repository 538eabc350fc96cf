// The command line as a person meets it, without launching ranks: --version, usage errors that
// exit 2 with one line and write nothing, `run` on something that is not a scenario file,
// `validate` reporting every problem of a file at once, and `suite --list`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace {

namespace fs = std::filesystem;
const std::string kSource = FAULTLINE_SOURCE_DIR;
const std::string kCli = FAULTLINE_CLI;
const std::string kSmoke = kSource + "/scenarios/suites/smoke.yaml";

std::string test_dir() {
  return fl::test::fresh_test_dir("cli",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// The smoke suite runs every symptom scenario and its fix variant.
size_t smoke_cases() {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(kSource + "/scenarios/symptoms")) {
    n += e.path().extension() == ".yaml" ? 2 : 0;
  }
  return n;
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(Cli, VersionNamesCommitBuildCompilerAndOptions) {
  auto r = fl::test::run_process({kCli, "--version"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("faultline 0.", 0), 0u) << r.output;
  for (const char* k : {"\ncommit     ", "\nbuild      ", "\ncompiler   ", "\noptions    CUDA "}) {
    EXPECT_NE(r.output.find(k), std::string::npos) << k << " in\n" << r.output;
  }
  EXPECT_EQ(r.output.find("commit     unknown"), std::string::npos)
      << "built from a git checkout, the commit is known: " << r.output;
}

TEST(Cli, HelpExitsZeroAndUsageErrorsExitTwoWithOneLine) {
  EXPECT_EQ(fl::test::run_process({kCli, "--help"}).exit_code, 0);
  EXPECT_EQ(fl::test::run_process({kCli, "suite", "--help"}).exit_code, 0);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, "A subcommand is required"},
      {{"frobnicate"}, "'frobnicate' is not a command (allowed: settings, sites, run, "},
      {{"run"}, "scenario is required"},
      {{"run", "x.yaml", "--no-such-flag"}, "--no-such-flag"},
      {{"suite", kSmoke, "-j", "0"}, "--jobs"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{kCli};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = fl::test::run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("faultline: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
  }
}

TEST(Cli, BadSuiteOptionsExitTwoNamingTheOptionAndWriteNothing) {
  const auto dir = test_dir();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--shard", "3/2"}, "faultline: --shard '3/2': the shard must be 1 to 2"},
      {{"--shard", "x"}, "faultline: --shard 'x': expected I/N"},
      {{"--retries", "-1"}, "--retries"},
      {{"--maxfail", "-1"}, "--maxfail"},
      {{"--json"},
       "faultline: --json: expected a PATH for the summary copy (without one it goes "
       "with --list)"},
      {{"--stage", "9"}, "--stage"},
      {{"--seeds", "a"}, "faultline: --seeds 'a': expected non-negative integers"},
      {{"--symptom", "9.9"}, "faultline: --symptom '9.9': not a symptom of the taxonomy"},
      {{"--only", "nothing-like-this"},
       "faultline: no case of suite 'smoke' (" + std::to_string(smoke_cases()) +
           " cases) matches --only 'nothing-like-this'"},
      {{"--last-failed"}, "faultline: --last-failed: no earlier results of suite 'smoke'"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv{kCli, "suite", kSmoke, "--results", dir + "/out"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = fl::test::run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
    EXPECT_FALSE(fs::exists(dir + "/out") && !fs::is_empty(dir + "/out"))
        << args[0] << " wrote into the results directory";
  }
}

TEST(Cli, BadMetricsOptionsAndStatusTargetsExitTwoNamingThemAndWriteNothing) {
  const auto dir = test_dir();
  const std::string open_secret = dir + "/open.secret";
  std::ofstream(open_secret) << "s3cret\n";
  fs::permissions(open_secret, fs::perms::owner_read | fs::perms::owner_write |
                                   fs::perms::group_read | fs::perms::others_read);
  const std::string scenario = kSource + "/scenarios/clean/clean-dp2-tp2.yaml";
  const std::string out = dir + "/out";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", scenario, "--results", out, "--metrics-port", "70000"},
       "faultline: error: --metrics-port '70000': expected a port 0-65535 (the endpoint listens on "
       "127.0.0.1); port 0 picks a free one"},
      {{"run", scenario, "--results", out, "--metrics-listen", "9400"},
       "faultline: error: --metrics-listen '9400': expected IPV4:PORT, e.g. 127.0.0.1:9400 or "
       "0.0.0.0:9400; port 0 picks a free one"},
      {{"run", scenario, "--results", out, "--metrics-port", "0", "--metrics-secret-file",
        open_secret},
       "faultline: error: --metrics-secret-file " + open_secret + ": owner uid " +
           std::to_string(::geteuid()) +
           ", mode 0644; allowed: a file of yours (or root's) that no other user can read or "
           "write (chmod 600): it is the endpoint's credential"},
      {{"suite", kSmoke, "--results", out, "--metrics-port", "x"},
       "faultline: error: --metrics-port 'x': expected a port 0-65535"},
      {{"status", dir},
       "faultline: error: " + dir +
           ": neither a run directory (no history.jsonl) nor a suite directory (no runs/)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv{kCli};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = fl::test::run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
    EXPECT_FALSE(fs::exists(out) && !fs::is_empty(out)) << args[0] << " wrote a run or suite";
  }
}

TEST(Cli, SuiteListPrintsTheSelectionAndRunsNothing) {
  const auto dir = test_dir();
  auto r = fl::test::run_process({kCli, "suite", kSmoke, "--list", "--symptom", "4.11", "--stage",
                                  "4", "--seeds", "1,2", "--results", dir + "/out"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("frozen-rank                              fix    seed 2      symptom 4.11"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("# 8 cases (2 scenarios) of suite smoke"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/out"));
  // Shards of the listing add up to the whole.
  size_t total = 0;
  for (const char* s : {"1/3", "2/3", "3/3"}) {
    auto part = fl::test::run_process({kCli, "suite", kSmoke, "--list", "--shard", s});
    ASSERT_EQ(part.exit_code, 0) << part.output;
    total += lines(part.output) - 1;
  }
  EXPECT_EQ(total, smoke_cases());
}

TEST(Cli, SuiteListJsonPrintsTheSelectionOrWritesItToAFile) {
  const auto dir = test_dir();
  auto r = fl::test::run_process({kCli, "suite", kSmoke, "--list", "--json", "--symptom", "4.11",
                                  "--exclude", "uneven-*", "--results", dir + "/out"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["cases"][0]["id"], "frozen-rank-s7");
  EXPECT_EQ(j["cases"][1]["id"], "frozen-rank-fix-s7");
  EXPECT_EQ(j["selection"]["exclude"], nlohmann::json({"uneven-*"}));
  r = fl::test::run_process(
      {kCli, "suite", kSmoke, "--list", "--json", dir + "/list.json", "--only", "frozen-rank"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
  std::ifstream in(dir + "/list.json");
  EXPECT_EQ(nlohmann::json::parse(in)["count"], 2);
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

TEST(Cli, RunOfADirectoryOrPlainTextSaysItIsNotAScenarioFile) {
  const auto dir = test_dir();
  auto r = fl::test::run_process({kCli, "run", dir, "--results", dir + "/out"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "faultline: " + dir + ": not a scenario file (a directory)\n");
  std::ofstream(dir + "/notes.txt") << "just some words\n";
  r = fl::test::run_process({kCli, "run", dir + "/notes.txt"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("notes.txt: not a scenario file (expected a YAML map of keys, found "
                          "plain text)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

TEST(Cli, ValidateReportsEveryErrorOfAFileInOnePass) {
  const auto dir = test_dir();
  const std::string f = dir + "/three.yaml";
  std::ofstream(f) << "name: three-errors\n"
                      "topology:\n"
                      "  ranks: 2\n"
                      "  launcher: slurm\n"
                      "workload:\n"
                      "  steps: many\n"
                      "  stepz: 3\n"
                      "expect: {oracle: completed}\n";
  auto r = fl::test::run_process({kCli, "validate", f});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("faultline: " + f + ": 3 errors:\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n  " + f +
                          ":4:13: topology.launcher: 'slurm' is not allowed "
                          "(allowed: auto, local, mpirun, command, srun, deepspeed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\n  " + f + ":6:10: workload.steps: expected integer, got 'many'"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\n  " + f + ":7:3: workload.stepz: unknown key (did you mean 'steps'?)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(lines(r.output), 4u) << r.output;
  // One problem reads as it always did.
  std::ofstream(dir + "/one.yaml") << "name: one\nworkload: {stepz: 3}\n";
  r = fl::test::run_process({kCli, "validate", dir + "/one.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("faultline: " + dir + "/one.yaml:2:12: workload.stepz: unknown key", 0),
            0u)
      << r.output;
}

// `faultline new`: the catalogue's scenario of a symptom, or a template, as a new file named by
// -o that validates; an existing file is never overwritten; anything else is named as not allowed.
TEST(Cli, NewScaffoldsAScenarioThatValidatesAndNeverOverwrites) {
  const auto dir = test_dir();
  const std::string f = dir + "/my-hang.yaml";
  auto r = fl::test::run_process({kCli, "new", "4.11", "-o", f});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + f + " from " + kSource +
                          "/scenarios/symptoms/4.11-frozen-rank.yaml (symptom 4.11: "),
            std::string::npos)
      << r.output;
  std::ifstream in(f);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.rfind("# yaml-language-server: $schema=", 0), 0u) << text;
  EXPECT_NE(text.find("\nname: my-hang\n"), std::string::npos) << text;
  EXPECT_EQ(fl::test::run_process({kCli, "validate", f}).exit_code, 0);
  // Again: refused, the file as it was.
  std::ofstream(f, std::ios::app) << "# edited\n";
  r = fl::test::run_process({kCli, "new", "train", "-o", f});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "faultline: new: " + f +
                          " exists; faultline new never overwrites a file (choose "
                          "another -o)\n");
  std::ifstream again(f);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), text + "# edited\n");
  for (const char* t : {"train", "infer", "command"}) {
    const std::string out = dir + "/" + t + ".yaml";
    r = fl::test::run_process({kCli, "new", t, "-o", out});
    EXPECT_EQ(r.exit_code, 0) << t << ": " << r.output;
    EXPECT_EQ(fl::test::run_process({kCli, "validate", out}).exit_code, 0) << t;
  }
  r = fl::test::run_process({kCli, "new", "9.9", "-o", dir + "/x.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "faultline: new: '9.9' is neither a symptom id of the taxonomy (e.g. 4.11; `faultline "
            "catalog` lists them) nor a template (allowed: train, infer, command)\n");
  EXPECT_FALSE(fs::exists(dir + "/x.yaml"));
}

}  // namespace
