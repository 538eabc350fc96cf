// Runs that get a verdict whatever their ranks print or write (issue 16, items 4 and 5), and
// checkpoint tools that exit 27 on a manifest that is not UTF-8 JSON (item 4).
//
// The run uses a stand-in worker (FAULTLINE_BIN_DIR): a script that prints bytes that are not
// UTF-8 and writes a malformed event and a step of rank -3 into its local event file, which the
// harness merges into the history when the run ends.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"

namespace {

namespace fs = std::filesystem;

std::string test_dir() {
  return fl::test::fresh_test_dir("input",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(InputRun, ARankPrintingInvalidUtf8AndPoisonedEventsStillGetsAVerdict) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/bin");
  {
    std::ofstream w(dir + "/bin/fl-train");
    w << "#!/bin/sh\n"
         "if [ \"$1\" = --describe ]; then exec '"
      << FAULTLINE_TRAIN
      << "' --describe; fi\n"
         "printf 'poison \\377\\376 byte\\n'\n"
         "printf 'half a sequence \\303\\n' >&2\n"
         "e=\"$FAULTLINE_EVENTS_FILE\"\n"
         "printf '%s\\n' '{\"rank\":-3,\"seq\":0,\"time_unix_ns\":1,\"kind\":\"step\","
         "\"step\":1,\"data\":{\"loss\":1.0}}' >> \"$e\"\n"
         "printf '%s\\n' '{\"rank\":0,\"seq\":1,\"time_unix_ns\":1,\"kind\":\"step\","
         "\"step\":1,\"data\":\"not an object\"}' >> \"$e\"\n"
         "printf '%s\\n' '{\"rank\":0,\"seq\":2,\"time_unix_ns\":1,\"kind\":\"step\","
         "\"step\":0,\"data\":{\"loss\":0.5}}' >> \"$e\"\n"
         "exit 0\n";
  }
  ::chmod((dir + "/bin/fl-train").c_str(), 0755);
  std::ofstream(dir + "/s.yaml") << "name: poison\ntopology: {ranks: 1}\n"
                                    "expect: {oracle: error_signature, pattern: poison}\n";
  auto r = fl::test::run_process({FAULTLINE_CLI, "run", dir + "/s.yaml", "--results", dir + "/runs",
                                  "--run-id", "p", "--report"},
                                 {{"FAULTLINE_BIN_DIR", dir + "/bin"}}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = dir + "/runs/p";
  const auto v = nlohmann::json::parse(read_text(run + "/verdict.json"));
  EXPECT_EQ(v.value("state", ""), "done");
  EXPECT_EQ(v.value("outcome", ""), "pass");
  EXPECT_NE(v.value("explanation", "").find("poison \xEF\xBF\xBD\xEF\xBF\xBD byte"),
            std::string::npos)
      << v.dump();
  EXPECT_EQ(v.value("rejected_events", -1), 2) << v.dump();
  EXPECT_NE(r.output.find("rejected   2 malformed event(s)"), std::string::npos) << r.output;
  // Every history line is JSON; the rejected events are counted in it, not written.
  std::ifstream h(run + "/history.jsonl");
  int steps = 0, rejected = 0;
  for (std::string l; std::getline(h, l);) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << l;
    if (j["kind"] == "step") {
      ++steps;
      EXPECT_EQ(j["rank"], 0);
    }
    if (j["kind"] == "events_rejected") rejected = j["data"]["count"];
  }
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(rejected, 2);
  EXPECT_TRUE(fs::exists(run + "/report.html"));
  // The run judges again from its history.
  auto again = fl::test::run_process({FAULTLINE_CLI, "verdict", run});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  fs::remove_all(dir);
}

// issue 32: one line nested 100000 levels deep overflowed the root harness's stack when it
// re-serialised the line's data (exit 139, verdict.json left `running`). The harness now drops
// such a line, and one longer than the line cap, and counts both with the refused events; the run
// gets its verdict. `deep` and `long` are shell commands that print the two lines.
const char* kDeepLine =
    "printf '{\"rank\":0,\"seq\":7,\"time_unix_ns\":1,\"kind\":\"step\",\"step\":0,"
    "\"data\":{\"x\":%s%s}}\\n' \"$(head -c 100000 /dev/zero | tr '\\0' '[')\" "
    "\"$(head -c 100000 /dev/zero | tr '\\0' ']')\"";
const char* kLongLine =
    "printf '{\"rank\":0,\"seq\":8,\"time_unix_ns\":1,\"kind\":\"log\",\"step\":-1,"
    "\"data\":{\"message\":\"%s\"}}\\n' \"$(head -c 2000000 /dev/zero | tr '\\0' 'z')\"";

// The verdict of a finished run in `run`, and the reasons the history gave for what it refused.
void expect_done_with_two_refused(const std::string& run, const std::string& file,
                                  const std::string& output) {
  const auto v = nlohmann::json::parse(read_text(run + "/verdict.json"));
  EXPECT_EQ(v.value("state", ""), "done") << v.dump();
  EXPECT_EQ(v.value("outcome", ""), "pass") << v.dump();
  EXPECT_EQ(v.value("rejected_events", -1), 2) << v.dump();
  std::ifstream h(run + "/history.jsonl");
  nlohmann::json first;
  for (std::string l; std::getline(h, l);) {
    auto j = nlohmann::json::parse(l);
    if (j["kind"] == "events_rejected") first = j["data"]["first"];
  }
  EXPECT_EQ(first, nlohmann::json::array({file + ":1: JSON nested deeper than 64 levels",
                                          file + ":2: a line longer than 1114112 bytes"}))
      << output;
}

TEST(InputRun, ARanksEventFileWithJsonNestedPastAnyStackStillGetsAVerdict) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/bin");
  {
    std::ofstream w(dir + "/bin/fl-train");
    w << "#!/bin/sh\n"
         "if [ \"$1\" = --describe ]; then exec '"
      << FAULTLINE_TRAIN << "' --describe; fi\n"
      << "e=\"$FAULTLINE_EVENTS_FILE\"\n"
      << kDeepLine << " >> \"$e\"\n"
      << kLongLine << " >> \"$e\"\n"
      << "printf '%s\\n' '{\"rank\":0,\"seq\":9,\"time_unix_ns\":1,\"kind\":\"step\","
         "\"step\":0,\"data\":{\"loss\":0.5}}' >> \"$e\"\n"
         "exit 0\n";
  }
  ::chmod((dir + "/bin/fl-train").c_str(), 0755);
  std::ofstream(dir + "/s.yaml")
      << "name: deep\ntopology: {ranks: 1}\nexpect: {oracle: completed}\n";
  auto r = fl::test::run_process(
      {FAULTLINE_CLI, "run", dir + "/s.yaml", "--results", dir + "/runs", "--run-id", "d"},
      {{"FAULTLINE_BIN_DIR", dir + "/bin"}}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_done_with_two_refused(dir + "/runs/d", "ranks/rank0/events.jsonl", r.output);
  // Judged again from its files: the same lines are skipped, not fatal.
  auto again = fl::test::run_process({FAULTLINE_CLI, "verdict", dir + "/runs/d"});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  fs::remove_all(dir);
}

TEST(InputRun, ACommandJobsProbeLineNestedPastAnyStackStillGetsAVerdict) {
  const auto dir = test_dir();
  fs::create_directories(dir);
  {
    std::ofstream w(dir + "/job.sh");
    w << "p=\"$FAULTLINE_PROBE_FILE\"\n"
         "printf '%s\\n' '{\"seq\":0,\"time_unix_ns\":1,\"kind\":\"heartbeat\",\"step\":-1,"
         "\"data\":{}}' >> \"$p\"\n"
      << kDeepLine << " >> \"$p\"\n"
      << kLongLine << " >> \"$p\"\n"
      << "exit 0\n";
  }
  std::ofstream(dir + "/s.yaml") << "name: deep-probe\ntopology: {ranks: 1}\n"
                                    "workload: {kind: command, command: [\"/bin/sh\", \""
                                 << dir << "/job.sh\"]}\nexpect: {oracle: completed}\n";
  auto r = fl::test::run_process(
      {FAULTLINE_CLI, "run", dir + "/s.yaml", "--results", dir + "/runs", "--run-id", "d"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The heartbeat is line 1 of the probe's file: the refused lines are 2 and 3.
  const auto v = nlohmann::json::parse(read_text(dir + "/runs/d/verdict.json"));
  EXPECT_EQ(v.value("state", ""), "done") << v.dump();
  EXPECT_EQ(v.value("rejected_events", -1), 2) << v.dump();
  EXPECT_NE(r.output.find("ranks/rank0/probe.jsonl:2: JSON nested deeper than 64 levels"),
            std::string::npos)
      << r.output;
  fs::remove_all(dir);
}

class CorruptManifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_dir();
    auto argv = fl::test::mpirun_prefix(1);
    for (std::string a : {std::string(FAULTLINE_TRAIN), std::string("--steps"), std::string("2"),
                          std::string("--save-every"), std::string("2"), std::string("--save-dir"),
                          dir_ + "/ckpt"}) {
      argv.push_back(a);
    }
    auto r = fl::test::run_process(argv, {{"MASTER_PORT", std::to_string(fl::test::free_port())}});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    manifest_ = dir_ + "/ckpt/step_2/manifest.json";
    ASSERT_TRUE(fs::exists(manifest_));
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Replaces the first occurrence of `what` in the manifest.
  void corrupt(const std::string& what, const std::string& with) {
    std::string m = read_text(manifest_);
    const auto at = m.find(what);
    ASSERT_NE(at, std::string::npos) << m;
    m.replace(at, what.size(), with);
    std::ofstream(manifest_, std::ios::binary | std::ios::trunc) << m;
  }
  // fl-train resuming from it, fl-ckpt inspect and digest: each exits 27 naming the manifest.
  void expect_exit_27() {
    auto argv = fl::test::mpirun_prefix(1);
    argv.insert(argv.end(), {FAULTLINE_TRAIN, "--steps", "4", "--resume", dir_ + "/ckpt/step_2"});
    const std::vector<std::vector<std::string>> runs = {argv,
                                                        {FAULTLINE_CKPT, "inspect", dir_ + "/ckpt"},
                                                        {FAULTLINE_CKPT, "digest", dir_ + "/ckpt"}};
    for (const auto& a : runs) {
      auto r = fl::test::run_process(a, {{"MASTER_PORT", std::to_string(fl::test::free_port())}});
      EXPECT_EQ(r.exit_code, fl::exit_code::kCheckpoint) << a.back() << "\n" << r.output;
      EXPECT_NE(r.output.find("faultline worker error (checkpoint): checkpoint manifest "),
                std::string::npos)
          << r.output;
    }
  }
  std::string dir_, manifest_;
};

TEST_F(CorruptManifest, BytesThatAreNotUtf8ExitWith27) {
  corrupt("\"precision\"", "\"prec\xff\xfeion\"");
  expect_exit_27();
}

// issue 32: a FIFO in place of the manifest hung fl-ckpt (and a resuming rank) in open().
TEST_F(CorruptManifest, AFifoInPlaceOfTheManifestIsRefusedNotWaitedOn) {
  fs::remove(manifest_);
  ASSERT_EQ(::mkfifo(manifest_.c_str(), 0600), 0);
  for (const char* cmd : {"inspect", "digest"}) {
    auto r =
        fl::test::run_process({FAULTLINE_CKPT, cmd, dir_ + "/ckpt"}, {}, std::chrono::seconds(30));
    EXPECT_FALSE(r.timed_out) << cmd << " hung on the FIFO";
    EXPECT_EQ(r.exit_code, fl::exit_code::kCheckpoint) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("cannot read " + manifest_ + ": not a regular file (a FIFO)"),
              std::string::npos)
        << r.output;
  }
}

TEST_F(CorruptManifest, AValueOfAnotherTypeExitsWith27) {
  corrupt("\"tp\": 1", "\"tp\": \"one\"");
  expect_exit_27();
}

// Issue 32, item 6: what `run` refuses before launch, `validate` refuses first, with the same
// message, and the refused run leaves nothing in the results directory.
TEST(InputRun, WhatRunRefusesValidateRefusesAndNoRunDirectoryIsLeft) {
  const auto dir = test_dir();
  fs::create_directories(dir);
  struct Case {
    std::string yaml, message;
    std::map<std::string, std::string> env = {};
  };
  const std::vector<Case> cases = {
      {"name: a\nworkload: {kind: command, command: [\"/nonexistent/fl-job\"]}\n",
       "s.yaml: workload.command[0]: '/nonexistent/fl-job' is not an executable file (PATH "},
      {"name: a\nenv: {FAULTLINE_CONTROL_SECRET: stolen}\n",
       "s.yaml:2:7: env.FAULTLINE_CONTROL_SECRET: FAULTLINE_CONTROL_SECRET is set by the harness "
       "for every rank and a scenario cannot set it (reserved: "},
      {"name: a\ntopology: {launcher: mpirun}\nworkload: {args: [\"--seq-len\", \"16 32\"]}\n",
       "s.yaml:3:32: workload.args[1]: '16 32' is empty or has whitespace or quotes"},
      {"name: a\ntopology: {launcher: mpirun}\nenv: {NCCL_DEBUG: \"a b\"}\n",
       "s.yaml:3:19: env.NCCL_DEBUG: 'a b' is empty or has whitespace or quotes"},
      {"name: a\nfaults:\n  - env: {set: {\"A B\": x}}\n",
       "s.yaml:3:17: faults[0].env.set.A B: 'A B' is not an environment variable name"},
      {"name: a\ntopology: {ranks: 2}\nfaults:\n  - {memory_limit: 300m, rank: 1}\n",
       "s.yaml: faults[].memory_limit: the cgroup v1 hierarchy at /nonexistent/cg is not "
       "writable (No such file or directory); set FAULTLINE_CGROUP_ROOT or run as root",
       {{"FAULTLINE_CGROUP_ROOT", "/nonexistent/cg"}}},
      {"name: a\nworkload: {plugins: [nosuchplugin]}\n",
       "s.yaml: workload.plugins: no library 'libfl_nosuchplugin.so' in the plugin directory " +
           dir + "/pl (FAULTLINE_PLUGIN_DIR; allowed: libfl_other.so)",
       {{"FAULTLINE_PLUGIN_DIR", dir + "/pl"}}},
  };
  fs::create_directories(dir + "/pl");
  std::ofstream(dir + "/pl/libfl_other.so") << "not a library";
  for (const auto& c : cases) {
    const std::string file = dir + "/s.yaml", results = dir + "/runs";
    std::ofstream(file) << c.yaml;
    fs::remove_all(results);
    fs::create_directories(results);
    auto v = fl::test::run_process({FAULTLINE_CLI, "validate", file}, c.env);
    EXPECT_EQ(v.exit_code, 2) << c.yaml << v.output;
    EXPECT_NE(v.output.find("faultline: " + file.substr(0, file.size() - 6) + c.message),
              std::string::npos)
        << c.yaml << v.output;
    auto r = fl::test::run_process({FAULTLINE_CLI, "run", file, "--results", results}, c.env,
                                   std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 2) << c.yaml << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.yaml << r.output;
    EXPECT_TRUE(fs::is_empty(results)) << c.yaml << "a run directory was left in " << results;
  }
  // --set extends is an error too, not silently ignored.
  std::ofstream(dir + "/s.yaml") << "name: a\n";
  auto e = fl::test::run_process(
      {FAULTLINE_CLI, "validate", dir + "/s.yaml", "--set", "extends=" + dir + "/s.yaml"});
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("extends cannot be overridden"), std::string::npos) << e.output;
  fs::remove_all(dir);
}

}  // namespace
