// The suite runner without real runs: selection (--only, --symptom, --stage, --exclude, --seeds,
// --last-failed), shards that split every case into exactly one, --list as text and JSON, suite
// files among the matched files skipped with a note, retries that make a case flaky, --fail-fast
// and --maxfail leaving the rest skipped, GPU cases skipped without a device, JUnit XML parsed
// back (reruns as Surefire writes them), and suite directories that stay unique when suites start
// together. The runs are a fake `faultline` (a shell script) that writes the verdict a test wants.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/model/scenario.hpp"
#include "harness/suite/calibrate.hpp"
#include "harness/suite/suite.hpp"
#include "kernels/device.hpp"
#include "tests/support/process.hpp"
#include "tests/support/xml.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kSource = FAULTLINE_SOURCE_DIR;
const std::string kSmoke = kSource + "/scenarios/suites/smoke.yaml";

std::string test_dir() {
  return test::fresh_test_dir("suite",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::set<std::string> ids(const std::vector<SuiteCase>& cases) {
  std::set<std::string> out;
  for (const auto& c : cases) out.insert(c.id());
  return out;
}

SuiteOptions quiet() {
  SuiteOptions o;
  o.progress = false;
  o.calibrate_every = 0;
  return o;
}

TEST(SuiteSelection, OnlySymptomAndStageNarrowTheSmokeSuite) {
  const SuitePlan all = plan_suite(kSmoke, quiet());
  ASSERT_GT(all.cases.size(), 40u);
  SuiteOptions o = quiet();
  o.select.only = {"*hang*"};
  auto hang = plan_suite(kSmoke, o);
  EXPECT_EQ(ids(hang.cases),
            (std::set<std::string>{"uneven-batches-hang-s7", "uneven-batches-hang-fix-s7"}));
  o = quiet();
  o.select.symptoms = {"4.11"};
  auto s411 = plan_suite(kSmoke, o);
  EXPECT_EQ(s411.cases.size(), 4u);  // two scenarios, each with its fix
  for (const auto& c : s411.cases) EXPECT_EQ(c.symptom, "4.11");
  o = quiet();
  o.select.stages = {1};
  auto stage1 = plan_suite(kSmoke, o);
  EXPECT_EQ(stage1.cases.size(), 6u);  // 1.1, 1.2, 1.3 and their fixes
  for (const auto& c : stage1.cases) EXPECT_EQ(c.stage, 1) << c.id();
  // Filters of one kind add up, filters of different kinds narrow.
  o = quiet();
  o.select.symptoms = {"1.1", "1.2"};
  o.select.only = {"jit-*"};
  EXPECT_EQ(ids(plan_suite(kSmoke, o).cases),
            (std::set<std::string>{"jit-build-no-compiler-s7", "jit-build-no-compiler-fix-s7"}));
}

TEST(SuiteSelection, ASelectionThatMatchesNothingNamesTheFilter) {
  SuiteOptions o = quiet();
  o.select.only = {"no-such-*"};
  try {
    plan_suite(kSmoke, o);
    FAIL() << "an empty selection ran";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("matches --only 'no-such-*'"), std::string::npos)
        << e.what();
  }
  o = quiet();
  o.select.only = {"frozen-rank"};
  o.select.stages = {5};
  try {
    plan_suite(kSmoke, o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("matches --only 'frozen-rank' with --stage 5"),
              std::string::npos)
        << e.what();
  }
  o = quiet();
  o.select.symptoms = {"9.9"};
  EXPECT_THROW(plan_suite(kSmoke, o), UsageError);
  o = quiet();
  o.select.stages = {0};
  EXPECT_THROW(plan_suite(kSmoke, o), UsageError);
}

TEST(SuiteSelection, SeedsReplaceTheSuitesSeeds) {
  SuiteOptions o = quiet();
  o.select.only = {"frozen-rank"};
  o.select.seeds = {1, 2, 3};
  auto p = plan_suite(kSmoke, o);
  EXPECT_EQ(ids(p.cases),
            (std::set<std::string>{"frozen-rank-s1", "frozen-rank-fix-s1", "frozen-rank-s2",
                                   "frozen-rank-fix-s2", "frozen-rank-s3", "frozen-rank-fix-s3"}));
  EXPECT_EQ(parse_seeds("1,2,3"), (std::vector<uint64_t>{1, 2, 3}));
  for (const char* bad : {"a", "1,,2", "1,", "-1", "1.5", ""}) {
    EXPECT_THROW(parse_seeds(bad), UsageError) << bad;
  }
}

TEST(SuiteShard, EveryCaseLandsInExactlyOneShardAndStaysThere) {
  // The hash is part of the interface: CI jobs on different machines must agree on the split.
  EXPECT_EQ(shard_of("frozen-rank-s7", 1), 0);
  EXPECT_EQ(shard_of("frozen-rank-s7", 4), shard_of("frozen-rank-s7", 4));
  EXPECT_EQ(shard_of("a", 1000), static_cast<int>(0xaf63dc4c8601ec8cULL % 1000));  // FNV-1a
  const SuitePlan all = plan_suite(kSmoke, quiet());
  for (int n : {1, 2, 3, 5}) {
    std::multiset<std::string> seen;
    for (int i = 1; i <= n; ++i) {
      SuiteOptions o = quiet();
      o.select.shard_index = i;
      o.select.shard_count = n;
      for (const auto& id : ids(plan_suite(kSmoke, o).cases)) seen.insert(id);
    }
    EXPECT_EQ(seen.size(), all.cases.size()) << n << " shards";
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), ids(all.cases)) << n << " shards";
  }
  int a = 0, b = 0;
  parse_shard("2/3", a, b);
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 3);
  for (const char* bad : {"3/2", "0/2", "x", "1/0", "1/", "/2", "1/2/3", "-1/2"}) {
    EXPECT_THROW(parse_shard(bad, a, b), UsageError) << bad;
  }
}

TEST(SuiteList, PrintsOneLinePerCaseAndTheCount) {
  SuiteOptions o = quiet();
  o.select.symptoms = {"4.11"};
  const std::string out = suite_list(plan_suite(kSmoke, o));
  EXPECT_NE(out.find("frozen-rank                              faulty seed 7      symptom 4.11\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("uneven-batches-hang                      fix    seed 7      symptom 4.11\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("# 4 cases (2 scenarios) of suite smoke\n"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 5);
}

// Scenarios the fake faultline knows by name; each loads as a real scenario would.
void write_scenarios(const std::string& dir, const std::vector<std::string>& names,
                     bool with_fix = false) {
  fs::create_directories(dir);
  for (const auto& n : names) {
    std::ofstream(dir + "/" + n + ".yaml")
        << "name: " << n << "\ntopology: {ranks: 1}\n"
        << (n.rfind("gpu", 0) == 0 ? "workload: {steps: 1, device: cuda}\n"
                                   : "workload: {steps: 1}\n")
        << "expect: {oracle: completed}\n"
        << (with_fix ? "fix: {expect: {absent: true}}\n" : "");
  }
}

// A stand-in for `faultline run FILE --results DIR --run-id ID --set seed=N [--fix]`: the
// scenario's name says what happens. flaky-*: fails on the first try of a case, passes after;
// fail-*: always fails (and leaves its pid in RESULTS/ID.pid); unknown-*: an unknown verdict;
// error-*: exits 2 without a verdict; nodevice-*: refused like a CUDA scenario on a machine
// without a device; wait-*: passes once a fail-* run has started and the suite has reaped it (a
// reaped process is gone; a zombie still answers kill -0), at most 30 s; anything else passes.
std::string fake_faultline(const std::string& dir) {
  const std::string path = dir + "/fake-faultline";
  std::ofstream(path) << R"(#!/bin/bash
file=$2 results=$4 id=$6
name=$(basename "$file" .yaml)
echo "$id" >> ")" << dir
                      << R"SH(/launched"
mkdir -p "$results/$id"
outcome=pass
case $name in
  flaky-*) if [[ $id != *-try* ]]; then outcome=fail; fi ;;
  fail-*) outcome=fail; echo $$ > "$results/$id.pid" ;;
  unknown-*) outcome=unknown ;;
  wait-*)
    for ((i = 0; i < 600; i++)); do
      gone=0
      for f in "$results"/*.pid; do
        [[ -e $f ]] && ! kill -0 "$(cat "$f")" 2>/dev/null && gone=1
      done
      ((gone)) && break
      sleep 0.05
    done ;;
  error-*) echo "faultline: error: something broke" >&2; rmdir "$results/$id"; exit 2 ;;
  nodevice-*) echo "faultline: $file: workload.device is cuda but no CUDA device is visible on this machine" >&2; rmdir "$results/$id"; exit 2 ;;
esac
printf '{"outcome": "%s", "explanation": "fake <verdict> & \\"%s\\"", "manifested_s": 1.5}\n' \
  "$outcome" "$id" > "$results/$id/verdict.json"
[[ $outcome == pass ]]
)SH";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// The fake's verdict explanation for run id `id`, behind "OUTCOME: " unless outcome is "".
std::string fmt_message(const std::string& outcome, const std::string& id) {
  return (outcome.empty() ? "" : outcome + ": ") + "fake <verdict> & \"" + id + "\"";
}

std::vector<std::string> lines_of(const std::string& file) {
  std::vector<std::string> out;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(SuiteRetries, ACaseThatPassesOnARetryIsFlakyAndAFailureStaysAFailure) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"flaky-a", "fail-b", "error-c", "pass-d"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.retries = 2;
  o.jobs = 2;
  const SuiteResult r = run_suite(dir + "/s", o);
  std::map<std::string, const SuiteCase*> by;
  for (const auto& c : r.cases) by[c.name] = &c;
  EXPECT_EQ(by["flaky-a"]->outcome, "flaky");
  EXPECT_EQ(by["flaky-a"]->attempts.size(), 2u);
  EXPECT_EQ(by["flaky-a"]->attempts[0].outcome, "fail");
  EXPECT_EQ(by["flaky-a"]->run_dir, r.dir + "/runs/flaky-a-s7-try2");
  EXPECT_EQ(by["fail-b"]->outcome, "fail");
  EXPECT_EQ(by["fail-b"]->attempts.size(), 3u);  // the first try and two retries
  EXPECT_EQ(by["error-c"]->outcome, "error");
  EXPECT_EQ(by["error-c"]->attempts.size(), 1u) << "harness errors are not retried";
  EXPECT_EQ(by["pass-d"]->outcome, "pass");
  EXPECT_EQ(r.failures(), 2);
  EXPECT_EQ(r.count("flaky"), 1);
  const auto launched = lines_of(dir + "/launched");
  EXPECT_EQ(launched.size(), 7u);  // flaky 2, fail 3, error 1, pass 1
  const std::string table = suite_table(r);
  EXPECT_NE(table.find("4 runs: 1 passed, 1 failed, 1 errors, 1 flaky, 0 skipped"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  FLAKY flaky-a seed 7: passed on try 2 of 2; try 1: fail"),
            std::string::npos)
      << table;
  const auto j = nlohmann::json::parse(read(r.dir + "/summary.json"));
  EXPECT_EQ(j["counts"]["flaky"], 1);
  EXPECT_EQ(j["failed"], 2);
  EXPECT_EQ(j["selection"]["retries"], 2);
}

TEST(SuiteFailFast, StopsLaunchingAfterTheFirstFailureAndSkipsTheRest) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"a-pass", "fail-b", "pass-c", "pass-d"});  // file order: run order
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.jobs = 1;
  o.fail_fast = true;
  const SuiteResult r = run_suite(dir + "/s", o);
  ASSERT_EQ(r.cases.size(), 4u);
  EXPECT_EQ(r.cases[0].outcome, "pass");
  EXPECT_EQ(r.cases[1].outcome, "fail");
  for (int i : {2, 3}) {
    EXPECT_EQ(r.cases[i].outcome, "skipped") << r.cases[i].name;
    EXPECT_EQ(r.cases[i].explanation,
              "not started: --fail-fast stopped the suite after fail-b seed 7 failed");
    EXPECT_TRUE(r.cases[i].attempts.empty());
  }
  EXPECT_EQ(lines_of(dir + "/launched").size(), 2u);
  EXPECT_NE(suite_table(r).find("  SKIPPED 2 cases: not started: --fail-fast"), std::string::npos);
  // --last-failed picks up the failure and what fail-fast never started.
  SuiteOptions again = quiet();
  again.results_dir = dir + "/out";
  again.select.last_failed = true;
  const SuitePlan p = plan_suite(dir + "/s", again);
  EXPECT_EQ(ids(p.cases), (std::set<std::string>{"fail-b-s7", "pass-c-s7", "pass-d-s7"}));
  EXPECT_EQ(p.previous_dir, r.dir);
}

TEST(SuiteLastFailed, NeedsEarlierResultsAndRerunsOnlyWhatDidNotPass) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"one", "two"}, true);
  SuiteOptions o = quiet();
  o.results_dir = dir + "/out";
  o.select.last_failed = true;
  try {
    plan_suite(dir + "/s", o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--last-failed: no earlier results of suite 's' under"),
              std::string::npos)
        << e.what();
  }
  // Two earlier results: the newest decides; passes and flaky cases are not run again.
  auto summary = [&](const std::string& name, const std::vector<std::string>& outcomes) {
    fs::create_directories(dir + "/out/" + name);
    nlohmann::json cases = nlohmann::json::array();
    const char* id[] = {"one-s7", "one-fix-s7", "two-s7", "two-fix-s7"};
    for (size_t i = 0; i < outcomes.size(); ++i) {
      cases.push_back({{"id", id[i]}, {"outcome", outcomes[i]}, {"explanation", ""}});
    }
    std::ofstream(dir + "/out/" + name + "/summary.json")
        << nlohmann::json{{"suite", "s"}, {"cases", cases}}.dump();
  };
  summary("20260101-000000-s", {"fail", "fail", "fail", "fail"});
  summary("20260102-000000-s", {"pass", "unknown", "flaky", "error"});
  const SuitePlan p = plan_suite(dir + "/s", o);
  EXPECT_EQ(ids(p.cases), (std::set<std::string>{"one-fix-s7", "two-fix-s7"}));
  // A later bench-detectors run of the same suite (its own directory suffix) is another series.
  summary("20260103-000000-s-detectors", {"fail", "fail", "fail", "fail"});
  EXPECT_EQ(ids(plan_suite(dir + "/s", o).cases),
            (std::set<std::string>{"one-fix-s7", "two-fix-s7"}));
  // Suites started in the same second: -2 is the later one.
  summary("20260104-000000-s", {"fail", "fail", "fail", "fail"});
  summary("20260104-000000-s-2", {"pass", "pass", "pass", "pass"});
  EXPECT_THROW(plan_suite(dir + "/s", o), UsageError) << "nothing failed in the newest results";
}

TEST(SuiteSkip, ACudaCaseWithoutADeviceIsSkippedNotFailed) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"gpu-train", "nodevice-refused", "plain"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  const SuiteResult r = run_suite(dir + "/s", o);
  std::map<std::string, const SuiteCase*> by;
  for (const auto& c : r.cases) by[c.name] = &c;
  EXPECT_EQ(by["gpu-train"]->outcome, "skipped");
  EXPECT_NE(by["gpu-train"]->explanation.find("no CUDA device is visible"), std::string::npos);
  EXPECT_TRUE(by["gpu-train"]->attempts.empty()) << "not even started";
  EXPECT_EQ(by["nodevice-refused"]->outcome, "skipped") << by["nodevice-refused"]->explanation;
  EXPECT_EQ(by["plain"]->outcome, "pass");
  EXPECT_EQ(r.failures(), 0);
}

TEST(SuiteJUnit, ParsesBackWithTotalsPropertiesAndOneElementPerOutcome) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"flaky-a", "fail-b", "error-c", "pass-d", "nodevice-e"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.retries = 1;
  o.junit_path = dir + "/ci.xml";
  const SuiteResult r = run_suite(dir + "/s", o);
  const std::string xml = read(dir + "/ci.xml");
  EXPECT_EQ(xml, read(r.dir + "/junit.xml"));
  std::unique_ptr<test::XmlElement> root;
  ASSERT_NO_THROW(root = test::parse_xml(xml)) << xml;
  EXPECT_EQ(root->name, "testsuites");
  EXPECT_EQ(root->attr("tests"), "5");
  EXPECT_EQ(root->attr("failures"), "1");
  EXPECT_EQ(root->attr("errors"), "1");
  EXPECT_EQ(root->attr("skipped"), "1");
  const auto* suite = root->child("testsuite");
  ASSERT_NE(suite, nullptr);
  EXPECT_EQ(suite->attr("name"), "s");
  EXPECT_EQ(suite->attr("tests"), "5");
  EXPECT_EQ(suite->attr("failures"), "1");
  EXPECT_EQ(suite->attr("errors"), "1");
  EXPECT_EQ(suite->attr("skipped"), "1");
  EXPECT_EQ(suite->attr("hostname"), host_name());
  EXPECT_EQ(suite->attr("timestamp").size(), 19u)
      << suite->attr("timestamp");  // 2026-01-31T04:24:55
  EXPECT_EQ(suite->attr("timestamp")[10], 'T');
  EXPECT_NEAR(std::stod(suite->attr("time")), r.wall_s, 0.001);  // the suite's wall clock
  const auto cases = suite->all("testcase");
  ASSERT_EQ(cases.size(), 5u);
  std::map<std::string, const test::XmlElement*> by;
  for (auto* c : cases) by[c->attr("name")] = c;
  for (auto* c : cases) {
    EXPECT_EQ(c->attr("classname"), "s/clean");  // no symptom: clean runs
    std::map<std::string, std::string> props;
    for (auto* p : c->child("properties")->all("property"))
      props[p->attr("name")] = p->attr("value");
    EXPECT_EQ(props["seed"], "7");
    EXPECT_EQ(props["variant"], "faulty");
    EXPECT_EQ(props["symptom"], "clean");
    EXPECT_FALSE(props["commit"].empty());
  }
  const auto* fail = by.at("fail-b seed 7");
  ASSERT_NE(fail->child("failure"), nullptr);
  // Markup in an explanation comes back as text.
  EXPECT_EQ(fail->child("failure")->attr("message"), "fail: fake <verdict> & \"fail-b-s7-try2\"");
  EXPECT_EQ(fail->child("error"), nullptr);
  ASSERT_NE(by.at("error-c seed 7")->child("error"), nullptr);
  ASSERT_NE(by.at("nodevice-e seed 7")->child("skipped"), nullptr);
  const auto* flaky = by.at("flaky-a seed 7");
  EXPECT_EQ(flaky->child("failure"), nullptr);
  ASSERT_EQ(flaky->all("flakyFailure").size(), 1u);
  EXPECT_NE(
      flaky->child("system-out")->text.find("run directory: " + r.dir + "/runs/flaky-a-s7-try2\n"),
      std::string::npos);
  EXPECT_EQ(by.at("pass-d seed 7")->children.size(), 2u);  // properties, system-out
}

TEST(SuiteJUnit, ClassnamesCarryStageAndSymptomWithoutDots) {
  SuiteResult r;
  r.name = "smoke.v2";
  SuiteCase c;
  c.name = "frozen-rank";
  c.symptom = "4.11";
  c.stage = 4;
  c.seed = 7;
  c.outcome = "pass";
  r.cases.push_back(c);
  c.symptom = "";
  c.stage = 0;
  c.name = "clean-dp2";
  r.cases.push_back(c);
  auto root = test::parse_xml(suite_junit(r));
  auto cases = root->child("testsuite")->all("testcase");
  EXPECT_EQ(cases[0]->attr("classname"), "smoke_v2/stage4/4_11");
  EXPECT_EQ(cases[1]->attr("classname"), "smoke_v2/clean");
  // Bytes that are not UTF-8 and control characters cannot break the file.
  r.cases[0].outcome = "fail";
  r.cases[0].explanation = std::string("bad \xff byte, bell \x07, tab\t<end>");
  root = test::parse_xml(suite_junit(r));
  EXPECT_NE(root->child("testsuite")->all("testcase")[0]->child("failure")->text.find("<end>"),
            std::string::npos);
}

TEST(SuiteDirectories, ThreeSuitesStartedTogetherGetThreeDirectories) {
  const auto dir = test_dir();
  // Three processes race for the same name at once (a pipe releases them together).
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char b;
      if (::read(go[0], &b, 1) < 0) ::_exit(3);
      try {
        const std::string d = make_unique_dir(dir + "/out", "20260101-000000-smoke");
        std::ofstream(d + "/owner") << ::getpid();
        ::_exit(0);
      } catch (...) {
        ::_exit(1);
      }
    }
    kids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // EOF releases all three
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::set<std::string> names, owners;
  for (auto& e : fs::directory_iterator(dir + "/out")) {
    names.insert(e.path().filename().string());
    owners.insert(read(e.path().string() + "/owner"));
  }
  EXPECT_EQ(names, (std::set<std::string>{"20260101-000000-smoke", "20260101-000000-smoke-2",
                                          "20260101-000000-smoke-3"}));
  EXPECT_EQ(owners.size(), 3u) << "each directory has its own owner";
}

TEST(SuiteProvenance, SummaryRecordsBuildMachineAndCalibration) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"pass-a", "pass-b"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.calibrate_every = 1;
  const SuiteResult r = run_suite(dir + "/s", o);
  const auto p = nlohmann::json::parse(read(r.dir + "/summary.json"))["provenance"];
  for (const char* k :
       {"faultline_version", "commit", "build_type", "compiler", "mpi", "hostname", "started"}) {
    ASSERT_TRUE(p.contains(k) && p[k].is_string() && !p[k].get<std::string>().empty()) << k;
  }
  EXPECT_NE(p["mpi"].get<std::string>().find("MPI"), std::string::npos) << p["mpi"];
  EXPECT_GE(p["cores"].get<int>(), 1);
  EXPECT_TRUE(p["load1_start"].is_number());
  EXPECT_TRUE(p["load1_end"].is_number());
  // Samples at the start, after each of the two runs, and at the end.
  const auto& samples = p["calibration"]["samples"];
  ASSERT_EQ(samples.size(), 4u) << p.dump(2);
  EXPECT_EQ(samples[0]["finished_runs"], 0);
  EXPECT_EQ(samples[3]["finished_runs"], 2);
  for (const auto& s : samples) EXPECT_GT(s["gflops"].get<double>(), 0.0);
  std::vector<double> v;
  for (const auto& s : samples) v.push_back(s["gflops"]);
  std::sort(v.begin(), v.end());
  EXPECT_DOUBLE_EQ(p["calibration"]["gflops"].get<double>(), (v[1] + v[2]) / 2);
  // The paragraph leaderboards carry.
  const std::string md = provenance_markdown(p);
  EXPECT_NE(md.find("Provenance: faultline " + p["faultline_version"].get<std::string>() + " (" +
                    p["commit"].get<std::string>()),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("GFLOP/s (median of 4 samples)"), std::string::npos) << md;
}

TEST(SuiteSelection, ExcludeLeavesOutMatchingScenariosAfterOnlyAndSymptom) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"alpha-one", "alpha-two", "beta-one", "gamma"}, true);
  SuiteOptions o = quiet();
  o.select.exclude = {"alpha-*", "gamma"};
  EXPECT_EQ(ids(plan_suite(dir + "/s", o).cases),
            (std::set<std::string>{"beta-one-s7", "beta-one-fix-s7"}));
  o.select.exclude = {"*-two"};
  o.select.only = {"alpha-*"};
  const SuitePlan p = plan_suite(dir + "/s", o);
  EXPECT_EQ(ids(p.cases), (std::set<std::string>{"alpha-one-s7", "alpha-one-fix-s7"}));
  EXPECT_EQ(p.selection["exclude"], nlohmann::json({"*-two"}));
  // On the smoke suite: after --symptom, one of the two 4.11 scenarios is left.
  o = quiet();
  o.select.symptoms = {"4.11"};
  o.select.exclude = {"uneven-*"};
  EXPECT_EQ(ids(plan_suite(kSmoke, o).cases),
            (std::set<std::string>{"frozen-rank-s7", "frozen-rank-fix-s7"}));
  // An exclusion that leaves nothing names the filters.
  o.select.exclude = {"uneven-*", "frozen-*"};
  try {
    plan_suite(kSmoke, o);
    FAIL() << "an empty selection was planned";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "matches --symptom '4.11' with --exclude 'uneven-*' or --exclude 'frozen-*'"),
              std::string::npos)
        << e.what();
  }
}

TEST(SuiteList, JsonHasEveryListedFieldOfTheSelectedCases) {
  SuiteOptions o = quiet();
  o.select.only = {"frozen-rank"};
  o.select.seeds = {1, 2};
  const auto j = suite_list_json(plan_suite(kSmoke, o));
  EXPECT_EQ(j["suite"], "smoke");
  EXPECT_EQ(j["count"], 4);
  EXPECT_EQ(j["scenarios"], 1);
  EXPECT_EQ(j["notes"], nlohmann::json::array());
  EXPECT_EQ(j["selection"]["only"], nlohmann::json({"frozen-rank"}));
  ASSERT_EQ(j["cases"].size(), 4u);
  const std::string file = kSource + "/scenarios/suites/../symptoms/4.11-frozen-rank.yaml";
  EXPECT_EQ(j["cases"][0], (nlohmann::json{{"id", "frozen-rank-s1"},
                                           {"scenario", "frozen-rank"},
                                           {"file", file},
                                           {"symptom", "4.11"},
                                           {"stage", 4},
                                           {"seed", 1},
                                           {"variant", "faulty"},
                                           {"device", "cpu"}}));
  std::set<std::string> listed;
  for (const auto& c : j["cases"]) {
    listed.insert(c["id"].get<std::string>() + " " + c["variant"].get<std::string>());
  }
  EXPECT_EQ(listed, (std::set<std::string>{"frozen-rank-s1 faulty", "frozen-rank-fix-s1 fix",
                                           "frozen-rank-s2 faulty", "frozen-rank-fix-s2 fix"}));
}

TEST(SuiteFiles, AGlobOverItsOwnFolderSkipsSuiteFilesWithANote) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"pass-a", "pass-b"});
  std::ofstream(dir + "/s/all.yaml") << "name: all\nscenarios: [\"*.yaml\"]\n";
  std::ofstream(dir + "/s/other.yaml")
      << "name: other\ndescription: another suite\nscenarios: [pass-a.yaml]\nseeds: [1]\nfix: "
         "false\n";
  const std::vector<std::string> notes = {
      dir +
          "/s/all.yaml: not loaded as a scenario: it is this suite's own file (top-level "
          "`scenarios:`)",
      dir + "/s/other.yaml: not loaded as a scenario: it is a suite file (top-level `scenarios:`)"};
  const SuitePlan p = plan_suite(dir + "/s/all.yaml", quiet());
  EXPECT_EQ(ids(p.cases), (std::set<std::string>{"pass-a-s7", "pass-b-s7"}));
  EXPECT_EQ(p.notes, notes);
  EXPECT_NE(suite_list(p).find("# note: " + notes[0] + "\n"), std::string::npos) << suite_list(p);
  EXPECT_EQ(suite_list_json(p)["notes"], nlohmann::json(notes));
  // A directory of scenarios skips them too (neither is this suite's file there).
  EXPECT_EQ(plan_suite(dir + "/s", quiet()).notes,
            (std::vector<std::string>{
                dir + "/s/all.yaml: not loaded as a scenario: it is a suite file (top-level "
                      "`scenarios:`)",
                notes[1]}));
  // A scenario with a stray `scenarios:` key is still a scenario, and its error is reported.
  std::ofstream(dir + "/s/broken.yaml")
      << "name: broken\ntopology: {ranks: 1}\nscenarios: [x]\nexpect: {oracle: completed}\n";
  EXPECT_FALSE(is_suite_file(dir + "/s/broken.yaml"));
  EXPECT_THROW(plan_suite(dir + "/s/all.yaml", quiet()), ScenarioError);
  fs::remove(dir + "/s/broken.yaml");
  // The notes reach the summary and the table.
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  const SuiteResult r = run_suite(dir + "/s/all.yaml", o);
  EXPECT_EQ(r.failures(), 0);
  EXPECT_EQ(nlohmann::json::parse(read(r.dir + "/summary.json"))["notes"], nlohmann::json(notes));
  EXPECT_NE(suite_table(r).find("  NOTE " + notes[1] + "\n"), std::string::npos) << suite_table(r);
}

TEST(SuiteMaxFail, StopsStartingCasesAfterNFailuresAndReportsTheRestNotRun) {
  const auto dir = test_dir();
  // Name order is run order (a-pass, fail-b, fail-d, pass-c, pass-e); with -j 1 nothing runs
  // beside the failing case.
  write_scenarios(dir + "/s", {"a-pass", "fail-b", "fail-d", "pass-c", "pass-e"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.jobs = 1;
  o.max_fail = 1;
  SuiteResult r = run_suite(dir + "/s", o);
  ASSERT_EQ(r.cases.size(), 5u);
  EXPECT_EQ(r.cases[0].outcome, "pass");
  EXPECT_EQ(r.cases[1].outcome, "fail");
  for (int i : {2, 3, 4}) {
    EXPECT_EQ(r.cases[i].outcome, "skipped") << r.cases[i].name;
    EXPECT_EQ(r.cases[i].explanation,
              "not started: --maxfail 1 stopped the suite after fail-b seed 7 failed");
    EXPECT_TRUE(r.cases[i].attempts.empty());
  }
  EXPECT_EQ(lines_of(dir + "/launched"), (std::vector<std::string>{"a-pass-s7", "fail-b-s7"}));
  EXPECT_EQ(r.exit_code(), 1);
  auto j = nlohmann::json::parse(read(r.dir + "/summary.json"));
  EXPECT_EQ(j["selection"]["maxfail"], 1);
  EXPECT_EQ(j["counts"]["skipped"], 3);
  EXPECT_EQ(j["cases"][4]["explanation"],
            "not started: --maxfail 1 stopped the suite after fail-b seed 7 failed");
  auto root = test::parse_xml(read(r.dir + "/junit.xml"));
  const auto cases = root->child("testsuite")->all("testcase");
  ASSERT_EQ(cases.size(), 5u);
  ASSERT_NE(cases[4]->child("skipped"), nullptr);
  EXPECT_EQ(cases[4]->child("skipped")->attr("message"),
            "not started: --maxfail 1 stopped the suite after fail-b seed 7 failed");
  EXPECT_NE(suite_table(r).find("  SKIPPED 3 cases: not started: --maxfail 1 stopped the suite "
                                "after fail-b seed 7 failed\n"),
            std::string::npos)
      << suite_table(r);

  // Two: the second failure stops it, and the message names both.
  fs::remove(dir + "/launched");
  o.max_fail = 2;
  r = run_suite(dir + "/s", o);
  EXPECT_EQ(lines_of(dir + "/launched"),
            (std::vector<std::string>{"a-pass-s7", "fail-b-s7", "fail-d-s7"}));
  for (int i : {3, 4}) {
    EXPECT_EQ(r.cases[i].outcome, "skipped");
    EXPECT_EQ(r.cases[i].explanation,
              "not started: --maxfail 2 stopped the suite after 2 cases failed (fail-b seed 7, "
              "fail-d seed 7)");
  }
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(SuiteMaxFail, ARunAlreadyInFlightFinishesAndNothingNewStarts) {
  const auto dir = test_dir();
  // -j 2: fail-a and wait-b start together; wait-b ends only after the suite reaped fail-a.
  write_scenarios(dir + "/s", {"fail-a", "wait-b", "x-pass-c"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.jobs = 2;
  o.max_fail = 1;
  const SuiteResult r = run_suite(dir + "/s", o);
  ASSERT_EQ(r.cases.size(), 3u);
  EXPECT_EQ(r.cases[0].outcome, "fail");
  EXPECT_EQ(r.cases[1].outcome, "pass") << "the run in flight was not stopped";
  EXPECT_EQ(r.cases[2].outcome, "skipped");
  EXPECT_EQ(r.cases[2].explanation,
            "not started: --maxfail 1 stopped the suite after fail-a seed 7 failed");
  EXPECT_EQ(lines_of(dir + "/launched").size(), 2u);
}

TEST(SuiteJUnit, RetriedCasesCarryRerunAndFlakyEntriesAsSurefireWritesThem) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"fail-b", "flaky-a", "pass-d", "unknown-c"});
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  o.retries = 2;
  const SuiteResult r = run_suite(dir + "/s", o);
  auto root = test::parse_xml(read(r.dir + "/junit.xml"));
  std::map<std::string, const test::XmlElement*> by;
  for (auto* c : root->child("testsuite")->all("testcase")) by[c->attr("name")] = c;
  auto names = [](const test::XmlElement* e) {
    std::vector<std::string> n;
    for (const auto& c : e->children) n.push_back(c->name);
    return n;
  };
  const std::string runs = r.dir + "/runs/";
  // Finally failed after three tries: <failure> for the last, a <rerunFailure> for each other.
  const auto* fail = by.at("fail-b seed 7");
  EXPECT_EQ(names(fail), (std::vector<std::string>{"properties", "failure", "rerunFailure",
                                                   "rerunFailure", "system-out"}));
  EXPECT_EQ(fail->child("failure")->attr("message"), "fail: fake <verdict> & \"fail-b-s7-try3\"");
  const auto reruns = fail->all("rerunFailure");
  const char* ids[] = {"fail-b-s7", "fail-b-s7-try2"};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(reruns[i]->attr("type"), "fail");
    EXPECT_EQ(reruns[i]->attr("message"), fmt_message("fail", ids[i]));
    EXPECT_EQ(names(reruns[i]), (std::vector<std::string>{"stackTrace", "system-out"}));
    EXPECT_EQ(reruns[i]->child("stackTrace")->text, fmt_message("", ids[i]));
    EXPECT_EQ(reruns[i]->child("system-out")->text, "try " + std::to_string(i + 1) +
                                                        " of 3\nrun directory: " + runs + ids[i] +
                                                        "\nlog: " + runs + ids[i] + ".log\n");
  }
  // Passed on the second try: one <flakyFailure>, no failure.
  const auto* flaky = by.at("flaky-a seed 7");
  EXPECT_EQ(names(flaky), (std::vector<std::string>{"properties", "flakyFailure", "system-out"}));
  const auto* ff = flaky->child("flakyFailure");
  EXPECT_EQ(ff->attr("type"), "fail");
  EXPECT_EQ(ff->attr("message"), fmt_message("fail", "flaky-a-s7"));
  EXPECT_EQ(ff->child("stackTrace")->text, fmt_message("", "flaky-a-s7"));
  EXPECT_EQ(ff->child("system-out")->text,
            "try 1 of 2\nrun directory: " + runs + "flaky-a-s7\nlog: " + runs + "flaky-a-s7.log\n");
  // An unknown verdict is an error in Surefire's terms: <error>, then <rerunError>s.
  EXPECT_EQ(
      names(by.at("unknown-c seed 7")),
      (std::vector<std::string>{"properties", "error", "rerunError", "rerunError", "system-out"}));
  EXPECT_EQ(by.at("unknown-c seed 7")->all("rerunError")[0]->attr("type"), "unknown");
  // A case that passed first time has neither.
  EXPECT_EQ(names(by.at("pass-d seed 7")), (std::vector<std::string>{"properties", "system-out"}));
}

TEST(Calibration, MeasuresAPositiveRateWithinItsBudget) {
  const double g = calibrate_gflops(std::chrono::milliseconds(20));
  EXPECT_GT(g, 0.0);
  EXPECT_LT(g, 1e4);  // a 128^3 GEMM loop on one core: far below 10 TFLOP/s
}

}  // namespace
}  // namespace fl::harness
