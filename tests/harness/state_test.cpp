// Issue 16, without real ranks: names that must stay one path component (run ids, suite names),
// environment variable names that reach an mpirun app file, run directories allocated by many
// processes at once, `faultline verdict`'s merge of the ranks' own event files, and how a suite
// reports interrupted runs and its own interruption (a fake `faultline` plays the runs).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/launch/launch_args.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/children.hpp"
#include "tests/support/process.hpp"
#include "tests/support/xml.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string test_dir() {
  return test::fresh_test_dir("state",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Names, RunIdsAndSuiteNamesAreSinglePathComponents) {
  for (const std::string ok : {"run-1", "20260101-120000-smoke-ab12", "a.b_c+d", "x"}) {
    EXPECT_EQ(refusal([&] { check_path_component("--run-id", ok); }), "") << ok;
  }
  for (const std::string& bad :
       std::vector<std::string>{"../x", "/tmp/x", "..", ".", "", "a/b", ".hidden", "-rf", "a b",
                                "a\nb", std::string(201, 'a')}) {
    const std::string e = refusal([&] { check_path_component("--run-id", bad); });
    EXPECT_NE(e.find("must be one path component under the results directory"), std::string::npos)
        << "'" << bad << "': " << e;
  }
  EXPECT_NE(refusal([] { check_path_component("--run-id", "a\nb"); }).find("'a\\x0ab'"),
            std::string::npos);
}

TEST(Names, EnvironmentVariableNamesCannotCarryAppFileOptions) {
  for (const std::string ok : {"A", "_x", "OMP_NUM_THREADS", "a1_B2"}) {
    EXPECT_EQ(refusal([&] { check_env_key(0, ok); }), "") << ok;
  }
  for (const std::string bad : {"A B", "A=B", "1A", "", "A\n-np 9 /bin/sh", "A-B", "A\tB"}) {
    const std::string e = refusal([&] { check_env_key(3, bad); });
    EXPECT_NE(e.find("rank 3: environment variable name"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("letters, digits and '_', not starting with a digit"), std::string::npos);
  }
}

// A variable name with whitespace in an mpirun app-file line would become options of its own
// (`-x A -np 9 /bin/sh=1`): the run is refused before the app file is written.
TEST(Names, AnEnvironmentNameWithWhitespaceNeverReachesTheAppFile) {
  const auto dir = test_dir();
  const std::string scen = dir + "/env.yaml";
  std::ofstream(scen) << "name: env-inject\ntopology: {ranks: 1, launcher: mpirun}\n"
                         "workload: {steps: 1}\nenv: {\"A -np 9 /bin/true -x B\": \"1\"}\n"
                         "expect: {oracle: completed}\n";
  auto r = test::run_process(
      {FAULTLINE_CLI, "run", scen, "--results", dir + "/runs", "--run-id", "env", "-q"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("A -np 9 /bin/true -x B"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/runs/env/appfile")) << read(dir + "/runs/env/appfile");
}

TEST(Names, ARunIdOrSuiteNameOutsideTheResultsDirectoryIsRefusedBeforeAnythingIsWritten) {
  const auto dir = test_dir();
  const std::string results = dir + "/results/runs";
  fs::create_directories(results);
  const std::string scen = dir + "/tiny.yaml";
  std::ofstream(scen) << "name: tiny\ntopology: {ranks: 1}\nworkload: {steps: 1}\n"
                         "expect: {oracle: completed}\n";
  for (const std::string& id : std::vector<std::string>{"../escaped", dir + "/absolute", ".."}) {
    auto r = test::run_process({FAULTLINE_CLI, "run", scen, "--results", results, "--run-id", id});
    EXPECT_EQ(r.exit_code, 2) << id << ": " << r.output;
    EXPECT_NE(r.output.find("--run-id '" + id.substr(0, 80)), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("must be one path component"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/results/escaped"));
  EXPECT_FALSE(fs::exists(dir + "/absolute"));
  EXPECT_TRUE(fs::is_empty(results));
  // A suite named ../.. would put its directory two levels above --results.
  std::ofstream(dir + "/suite.yaml") << "name: ../..\nscenarios: [tiny.yaml]\n";
  auto r = test::run_process(
      {FAULTLINE_CLI, "suite", dir + "/suite.yaml", "--results", dir + "/results/suites"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("suite.yaml:1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("name '../..': must be one path component"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/results/suites"));
}

// A suite's case ids and run directories are named by scenario: two files that share a name would
// run into one directory, the second clobbering the first. The suite refuses them before
// anything runs, naming both files.
TEST(Names, TwoScenarioFilesOfOneNameInASuiteAreRefusedBeforeAnythingRuns) {
  const auto dir = test_dir();
  for (const char* f : {"/a.yaml", "/b.yaml"}) {
    std::ofstream(dir + f) << "name: tiny\ntopology: {ranks: 1}\nworkload: {steps: 1}\n"
                              "expect: {oracle: completed}\n";
  }
  std::ofstream(dir + "/suite.yaml") << "name: s\nscenarios: [a.yaml, b.yaml]\n";
  auto r = test::run_process(
      {FAULTLINE_CLI, "suite", dir + "/suite.yaml", "--results", dir + "/results"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("b.yaml: name 'tiny' is also the name of " + dir + "/a.yaml"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/results"));
}

// Twelve processes allocate run directories for the same scenario in the same second, and
// twelve more suite directories of the same name (a pipe releases them together): each gets its
// own. A run id's random part may repeat; mkdir, which fails on an existing name, makes every
// allocation exclusive, and a clash draws again.
TEST(RunDirectories, ConcurrentAllocationsNeverShareADirectory) {
  const auto dir = test_dir();
  constexpr int kKids = 12;
  const auto statuses = test::race_children(2 * kKids, [&](int i) {
    const std::string d = i < kKids ? create_run_dir(dir + "/runs", "", "tiny").second
                                    : make_unique_dir(dir + "/suites", "20260101-000000-s");
    std::ofstream(d + "/owner") << ::getpid();
  });
  EXPECT_EQ(statuses, std::vector<int>(2 * kKids, 0)) << "every child exits 0";
  for (const char* sub : {"/runs", "/suites"}) {
    std::set<std::string> owners;
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir + sub)) {
      ++n;
      owners.insert(read(e.path().string() + "/owner"));
    }
    EXPECT_EQ(n, static_cast<size_t>(kKids)) << sub;
    EXPECT_EQ(owners.size(), static_cast<size_t>(kKids)) << sub << ": each has its own owner";
  }
  // A given id is never shared either: the second allocation is refused.
  create_run_dir(dir + "/given", "mine", "tiny");
  EXPECT_NE(refusal([&] {
              create_run_dir(dir + "/given", "mine", "tiny");
            }).find("the run directory already exists"),
            std::string::npos);
}

// A history cut short by a SIGKILL, and rank files holding what it lacks.
TEST(VerdictAfterAKill, TheRanksOwnEventFilesAreMergedWithoutDuplicates) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  fs::create_directories(dir + "/ranks/rank1");
  const int64_t t0 = 1'700'000'000'000'000'000;
  auto hist_line = [&](int i, const std::string& source, int rank, int seq, int64_t t,
                       const std::string& kind, int step) {
    return nlohmann::json{{"i", i},
                          {"t_ns", t},
                          {"source", source},
                          {"rank", rank},
                          {"seq", seq},
                          {"time_unix_ns", t0 + t},
                          {"kind", kind},
                          {"step", step},
                          // run_start says the world (the history's schema needs it)
                          {"data", kind == "run_start" ? nlohmann::json{{"ranks", 2}}
                                                       : nlohmann::json::object()}}
               .dump() +
           "\n";
  };
  auto rank_line = [&](int rank, int seq, int64_t t, const std::string& kind, int step) {
    return nlohmann::json{{"rank", rank}, {"seq", seq},   {"time_unix_ns", t0 + t},
                          {"kind", kind}, {"step", step}, {"data", {{"loss", 1.0}}}}
               .dump() +
           "\n";
  };
  std::ofstream(dir + "/history.jsonl")
      << hist_line(0, "harness", -1, 0, 0, "run_start", -1)
      << hist_line(1, "harness", 0, 0, 100, "launch", -1)
      << hist_line(2, "rank", 0, 0, 200, "step", 0) << hist_line(3, "rank", 1, 0, 210, "step", 0)
      << "{\"i\":4,\"t_ns\":3";  // torn by the kill
  std::ofstream(dir + "/ranks/rank0/events.jsonl")
      << rank_line(0, 0, 200, "step", 0) << rank_line(0, 1, 300, "step", 1)
      << rank_line(0, 2, 400, "step", 2) << "{\"rank\":0,\"se";  // torn
  std::ofstream(dir + "/ranks/rank1/events.jsonl")
      << rank_line(1, 0, 210, "step", 0) << rank_line(1, 1, 310, "step", 1)
      << rank_line(7, 2, 250, "error", 1);  // a line claiming another rank stays rank 1's
  const RecoveredHistory h = history_with_rank_files(dir);
  EXPECT_EQ(h.recovered, 4);
  EXPECT_EQ(h.rank_events, 6);
  std::vector<std::tuple<int, int64_t, std::string, bool>> got;
  for (const auto& e : h.events) got.emplace_back(e.rank, e.t_ns, e.kind, e.late);
  const std::vector<std::tuple<int, int64_t, std::string, bool>> want = {
      {-1, 0, "run_start", false}, {0, 100, "launch", false}, {0, 200, "step", false},
      {1, 210, "step", false},     {1, 250, "error", true},   {0, 300, "step", true},
      {1, 310, "step", true},      {0, 400, "step", true}};
  EXPECT_EQ(got, want);
  // A second look finds nothing more (the merge is idempotent on what it already has).
  EXPECT_EQ(history_with_rank_files(dir).recovered, 4);
}

// A stand-in for `faultline run FILE --results DIR --run-id ID ...`; the scenario's name says
// what happens. interrupted-*: the run says interrupted (exit 4); killed-*: dies by SIGKILL with
// its verdict still `running`; slow-*: runs until SIGTERM, then says interrupted; else passes.
std::string fake_faultline(const std::string& dir) {
  const std::string path = dir + "/fake-faultline";
  std::ofstream(path) << R"(#!/bin/bash
file=$2 results=$4 id=$6
name=$(basename "$file" .yaml)
mkdir -p "$results/$id"
v="$results/$id/verdict.json"
echo '{"outcome": "unknown", "state": "running"}' > "$v"
echo "$id" >> ")" << dir
                      << R"(/launched"
case $name in
  *-interrupted-*) echo '{"outcome": "interrupted", "explanation": "the harness got SIGINT", "state": "done"}' > "$v"; exit 4 ;;
  *-killed) kill -KILL $$ ;;
  *-slow) trap 'echo "{\"outcome\": \"interrupted\", \"explanation\": \"the harness got SIGTERM\", \"state\": \"done\"}" > "$v"; exit 4' TERM
          while true; do sleep 0.05; done ;;
esac
echo '{"outcome": "pass", "explanation": "ok", "state": "done"}' > "$v"
)";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST(SuiteInterruption, InterruptedRunsAndASigtermToTheSuiteAreReportedAsInterrupted) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/s");
  // File order is run order (one job at a time).
  for (const std::string n : {"a-interrupted-x", "b-killed", "c-pass", "d-slow", "e-later"}) {
    std::ofstream(dir + "/s/" + n + ".yaml")
        << "name: " << n.substr(2) << "\ntopology: {ranks: 1}\nworkload: {steps: 1}\n"
        << "expect: {oracle: completed}\n";
  }
  SuiteOptions o;
  o.progress = false;
  o.calibrate_every = 0;
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.retries = 1;  // an interrupted case is not retried
  o.jobs = 1;     // one at a time: with two, e-later runs beside d-slow and may finish first
  // Once the slow case runs, the suite gets SIGTERM (its handler is installed while it runs).
  std::thread killer([&] {
    for (int i = 0; i < 6000; ++i) {
      if (read(dir + "/launched").find("slow") != std::string::npos) {
        ::kill(::getpid(), SIGTERM);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const SuiteResult r = run_suite(dir + "/s", o);
  killer.join();
  std::map<std::string, const SuiteCase*> by;
  for (const auto& c : r.cases) by[c.name] = &c;
  ASSERT_EQ(by.size(), 5u);
  EXPECT_EQ(by["interrupted-x"]->outcome, "interrupted");
  EXPECT_EQ(by["interrupted-x"]->attempts.size(), 1u);
  EXPECT_EQ(by["killed"]->outcome, "interrupted");
  EXPECT_NE(by["killed"]->explanation.find("the run ended by SIGKILL before its verdict"),
            std::string::npos)
      << by["killed"]->explanation;
  EXPECT_EQ(by["pass"]->outcome, "pass");
  EXPECT_EQ(by["slow"]->outcome, "interrupted");
  EXPECT_EQ(by["slow"]->explanation, "the harness got SIGTERM");
  EXPECT_EQ(by["pass"]->attempts.size(), 1u);
  // e-later was never started.
  EXPECT_EQ(by["later"]->outcome, "interrupted");
  EXPECT_EQ(by["later"]->explanation, "not started: the suite got SIGTERM");
  EXPECT_TRUE(by["later"]->attempts.empty());
  EXPECT_EQ(r.interrupted, "SIGTERM");
  EXPECT_EQ(r.count("interrupted"), 4);
  EXPECT_EQ(r.exit_code(), 4);
  // JUnit: errors of type interrupted; the JSON summary and the table count them.
  auto root = test::parse_xml(read(r.dir + "/junit.xml"));
  const auto* suite = root->child("testsuite");
  EXPECT_EQ(suite->attr("errors"), "4");
  int typed = 0;
  for (const auto* c : suite->all("testcase")) {
    if (const auto* err = c->child("error"); err && err->attr("type") == "interrupted") ++typed;
  }
  EXPECT_EQ(typed, 4);
  const auto j = nlohmann::json::parse(read(r.dir + "/summary.json"));
  EXPECT_EQ(j["counts"]["interrupted"], 4);
  EXPECT_EQ(j["interrupted"], "SIGTERM");
  const std::string table = suite_table(r);
  EXPECT_NE(table.find("5 runs: 1 passed, 0 failed, 0 errors, 0 flaky, 0 skipped, 4 interrupted"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("INTERRUPTED the suite got SIGTERM"), std::string::npos) << table;
  // --last-failed runs the interrupted cases again.
  SuiteOptions again = o;
  again.select.last_failed = true;
  const SuitePlan p = plan_suite(dir + "/s", again);
  EXPECT_EQ(p.cases.size(), 4u);
}

}  // namespace
}  // namespace fl::harness
