// A suite's runs through a fake `faultline` (suite_fixture.hpp): retries that make a case flaky,
// --fail-fast and --maxfail leaving the rest skipped, GPU cases skipped without a device, JUnit
// XML parsed back (reruns as Surefire writes them), the provenance a summary records, and
// --longest-first's launch order.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/suite/suite.hpp"
#include "kernels/device.hpp"
#include "tests/harness/suite_fixture.hpp"
#include "tests/support/xml.hpp"

namespace fl::harness {
namespace {

using namespace suite_fixture;
namespace fs = std::filesystem;

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
  SuiteOptions o = fake_runs(dir);
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
  SuiteOptions o = fake_runs(dir);
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

TEST(SuiteLongestFirst, StartsTheCasesAnEarlierSummaryTimedLongestFirstAndNewCasesBeforeThem) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"a", "b", "c", "d", "e", "f"});
  // An earlier summary: b took longest, then d, then a; c is new; e's time is no number; f was
  // never started (its 0 s is no time); "gone" is no longer a case. A case from before case ids
  // has no "id". b is listed twice (a hand-merged file): its longer time counts.
  const nlohmann::json ran = {{{"outcome", "pass"}}};
  const nlohmann::json earlier = {
      {"suite", "s"},
      {"cases",
       {{{"id", "a-s7"}, {"outcome", "pass"}, {"attempts", ran}, {"wall_s", 1.5}},
        {{"id", "b-s7"}, {"outcome", "fail"}, {"attempts", ran}, {"wall_s", 3.0}},
        {{"id", "b-s7"}, {"outcome", "flaky"}, {"attempts", ran}, {"wall_s", 30.0}},
        {{"scenario", "d"},
         {"variant", "faulty"},
         {"seed", 7},
         {"outcome", "unknown"},
         {"attempts", ran},
         {"wall_s", 4.0}},
        {{"id", "e-s7"}, {"outcome", "pass"}, {"attempts", ran}, {"wall_s", "?"}},
        {{"id", "f-s7"},
         {"outcome", "skipped"},
         {"attempts", nlohmann::json::array()},
         {"wall_s", 0.0}},
        {{"id", "gone-s7"}, {"outcome", "pass"}, {"attempts", ran}, {"wall_s", 99.0}},
        "not a case"}}};
  fs::create_directories(dir + "/earlier");
  std::ofstream(dir + "/earlier/summary.json") << earlier.dump();
  SuiteOptions o = fake_runs(dir);
  o.jobs = 1;
  o.longest_first = dir + "/earlier";  // the suite directory; its summary.json is read
  const SuiteResult r = run_suite(dir + "/s", o);
  // c, e and f (no time) first in suite order, then b, d, a.
  EXPECT_EQ(lines_of(dir + "/launched"),
            (std::vector<std::string>{"c-s7", "e-s7", "f-s7", "b-s7", "d-s7", "a-s7"}));
  ASSERT_EQ(r.cases.size(), 6u);
  EXPECT_EQ(r.cases[0].name, "a") << "the result keeps suite order";
  const auto j = nlohmann::json::parse(read(r.dir + "/summary.json"));
  EXPECT_EQ(j["selection"]["longest_first"], dir + "/earlier");
}

TEST(SuiteLongestFirst, AFileThatIsNoSummaryIsRefusedBeforeAnythingRuns) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"a", "b"});
  SuiteOptions o = fake_runs(dir);
  o.jobs = 1;  // the launch order is the order the fake records
  const auto refusal = [&](const std::string& path) {
    o.longest_first = path;
    try {
      run_suite(dir + "/s", o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::ofstream(dir + "/list.json") << "[1, 2]";
  EXPECT_EQ(refusal(dir + "/list.json"),
            "--longest-first " + dir +
                "/list.json: not a suite summary (expected an object with \"suite\" and a "
                "\"cases\" list, as `faultline suite` writes summary.json)");
  // `faultline suite --list --json`'s file names its suite and cases, but no case has a time:
  // accepted, with a warning, in suite order.
  std::ofstream(dir + "/listed.json") << suite_list_json(plan_suite(dir + "/s", quiet())).dump();
  EXPECT_EQ(refusal(dir + "/listed.json"), "accepted");
  EXPECT_EQ(lines_of(dir + "/launched"), (std::vector<std::string>{"a-s7", "b-s7"}));
  const std::string missing = refusal(dir + "/missing.json");
  EXPECT_NE(missing.find("--longest-first: " + dir + "/missing.json"), std::string::npos)
      << missing;
  EXPECT_EQ(lines_of(dir + "/launched").size(), 2u) << "a refused suite started a run";
}

TEST(SuiteSkip, ACudaCaseWithoutADeviceIsSkippedNotFailed) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"gpu-train", "nodevice-refused", "plain"});
  SuiteOptions o = fake_runs(dir);
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
  SuiteOptions o = fake_runs(dir);
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

TEST(SuiteProvenance, SummaryRecordsBuildMachineAndCalibration) {
  const auto dir = test_dir();
  write_scenarios(dir + "/s", {"pass-a", "pass-b"});
  SuiteOptions o = fake_runs(dir);
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

TEST(SuiteMaxFail, StopsStartingCasesAfterNFailuresAndReportsTheRestNotRun) {
  const auto dir = test_dir();
  // Name order is run order (a-pass, fail-b, fail-d, pass-c, pass-e); with -j 1 nothing runs
  // beside the failing case.
  write_scenarios(dir + "/s", {"a-pass", "fail-b", "fail-d", "pass-c", "pass-e"});
  SuiteOptions o = fake_runs(dir);
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
  SuiteOptions o = fake_runs(dir);
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
  SuiteOptions o = fake_runs(dir);
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

}  // namespace
}  // namespace fl::harness
