// The suite runner's plan without real runs: selection (--only, --symptom, --stage, --exclude,
// --seeds, --last-failed against earlier results), shards that split every case into exactly
// one, --list as text and JSON, suite files among the matched files skipped with a note, JUnit
// classnames, suite directories that stay unique when suites start together, and the machine's
// calibration. The runs themselves are suite_runs_test.cpp's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/model/scenario.hpp"
#include "harness/suite/calibrate.hpp"
#include "harness/suite/suite.hpp"
#include "tests/harness/suite_fixture.hpp"
#include "tests/support/children.hpp"
#include "tests/support/xml.hpp"

namespace fl::harness {
namespace {

using namespace suite_fixture;
namespace fs = std::filesystem;

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
  const auto statuses = test::race_children(3, [&](int) {
    const std::string d = make_unique_dir(dir + "/out", "20260101-000000-smoke");
    std::ofstream(d + "/owner") << ::getpid();
  });
  EXPECT_EQ(statuses, std::vector<int>(3, 0)) << "every child exits 0";
  std::set<std::string> names, owners;
  for (auto& e : fs::directory_iterator(dir + "/out")) {
    names.insert(e.path().filename().string());
    owners.insert(read(e.path().string() + "/owner"));
  }
  EXPECT_EQ(names, (std::set<std::string>{"20260101-000000-smoke", "20260101-000000-smoke-2",
                                          "20260101-000000-smoke-3"}));
  EXPECT_EQ(owners.size(), 3u) << "each directory has its own owner";
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
  SuiteOptions o = fake_runs(dir);
  const SuiteResult r = run_suite(dir + "/s/all.yaml", o);
  EXPECT_EQ(r.failures(), 0);
  EXPECT_EQ(nlohmann::json::parse(read(r.dir + "/summary.json"))["notes"], nlohmann::json(notes));
  EXPECT_NE(suite_table(r).find("  NOTE " + notes[1] + "\n"), std::string::npos) << suite_table(r);
}

TEST(Calibration, MeasuresAPositiveRateWithinItsBudget) {
  const double g = calibrate_gflops(std::chrono::milliseconds(20));
  EXPECT_GT(g, 0.0);
  EXPECT_LT(g, 1e4);  // a 128^3 GEMM loop on one core: far below 10 TFLOP/s
}

}  // namespace
}  // namespace fl::harness
