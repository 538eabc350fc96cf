// faultline merge's rules without runs: shard results are what plan_suite plans for --shard I/3
// with outcomes filled in, written as the suite writes them (summary.json); then merged. Each
// case once with its shard, a duplicate kept from the first directory given, the cases of an
// absent shard missing (summary, table, JUnit), and the directories merge refuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/suite/merge.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string merge_dir() {
  return test::fresh_test_dir("suite_merge",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// Shards of 3 by FNV-1a of the case id: 1: pass-c, fail-e; 2: pass-a, pass-b; 3: pass-d.
void write_merge_scenarios(const std::string& dir) {
  fs::create_directories(dir);
  for (const char* n : {"pass-a", "pass-b", "pass-c", "pass-d", "fail-e"}) {
    std::ofstream(dir + "/" + n + ".yaml")
        << "name: " << n << "\ntopology: {ranks: 1}\nworkload: {steps: 1}\n"
        << "expect: {oracle: completed}\n";
  }
}

// What `faultline suite DIR --shard I/3` would leave in `results`/shard-I, every case settled
// by its name (fail-* fails), its run directories written where that machine had them.
std::string write_shard(const std::string& root, int index, const std::string& recorded_at) {
  SuiteOptions o;
  o.select.shard_index = index;
  o.select.shard_count = 3;
  const SuitePlan plan = plan_suite(root + "/s", o);
  SuiteResult r;
  r.name = plan.name;
  r.cases = plan.cases;
  r.selection = plan.selection;
  r.dir = recorded_at;  // the path on the machine that ran it
  for (auto& c : r.cases) {
    c.outcome = c.name.rfind("fail", 0) == 0 ? "fail" : "pass";
    c.run_dir = recorded_at + "/runs/" + c.id();
    c.attempts.push_back({c.outcome, "", c.run_dir, 1.0, ""});
    c.shard = fmt::format("{}/3", index);
  }
  r.provenance.hostname = fmt::format("node{}", index);
  r.provenance.started = fmt::format("2026-11-29T0{}:00:00+00:00", index);
  const std::string dir = fmt::format("{}/shard-{}", root, index);
  fs::create_directories(dir);
  std::ofstream(dir + "/summary.json") << suite_json(r).dump(2);
  return dir;
}

std::map<std::string, const SuiteCase*> by_id(const std::vector<SuiteCase>& cases) {
  std::map<std::string, const SuiteCase*> m;
  for (const auto& c : cases) m[c.id()] = &c;
  return m;
}

TEST(SuiteMerge, ThreeShardsGiveEveryPlannedCaseOnceWithItsShard) {
  const auto dir = merge_dir();
  write_merge_scenarios(dir + "/s");
  const auto s1 = write_shard(dir, 1, "/elsewhere/a"), s2 = write_shard(dir, 2, "/elsewhere/b"),
             s3 = write_shard(dir, 3, "/elsewhere/c");
  const SuiteResult r = merge_suite_dirs({s1, s2, s3});
  ASSERT_EQ(r.cases.size(), 5u);
  auto c = by_id(r.cases);
  EXPECT_EQ(c["pass-a-s7"]->shard, "2/3");
  EXPECT_EQ(c["pass-a-s7"]->shard_dir, s2);
  EXPECT_EQ(c["pass-d-s7"]->shard, "3/3");
  EXPECT_EQ(c["fail-e-s7"]->shard, "1/3");
  // Run directories recorded on the shard's machine, read where the directory is now.
  EXPECT_EQ(c["pass-a-s7"]->run_dir, s2 + "/runs/pass-a-s7");
  EXPECT_EQ(c["pass-a-s7"]->attempts[0].run_dir, s2 + "/runs/pass-a-s7");
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.merge["planned"], 5);
  EXPECT_EQ(r.merge["shards"].size(), 3u);
  EXPECT_EQ(r.provenance.hostname, "node1, node2, node3");
  EXPECT_EQ(r.failures(), 1);
  EXPECT_EQ(r.exit_code(), 1);
  const std::string junit = suite_junit(r);
  EXPECT_NE(junit.find("<testsuite name=\"s\" tests=\"5\" failures=\"1\" errors=\"0\""),
            std::string::npos)
      << junit;
  EXPECT_NE(junit.find("<property name=\"shard\" value=\"2/3\"/>"), std::string::npos);
}

TEST(SuiteMerge, ADuplicateIsKeptFromTheFirstDirectoryAndAnAbsentShardsCasesAreMissing) {
  const auto dir = merge_dir();
  write_merge_scenarios(dir + "/s");
  const auto s1 = write_shard(dir, 1, "/x/a"), s3 = write_shard(dir, 3, "/x/c");
  const std::string copy = dir + "/copy-of-shard-1";
  fs::copy(s1, copy);
  const SuiteResult r = merge_suite_dirs({copy, s1, s3});
  EXPECT_EQ(r.cases.size(), 3u);
  EXPECT_EQ(by_id(r.cases)["pass-c-s7"]->shard_dir, copy);
  ASSERT_EQ(r.merge["duplicates"].size(), 2u);
  EXPECT_EQ(r.merge["duplicates"][0]["detail"],
            "fail-e seed 7: in " + copy + " (shard 1/3, fail) and " + s1 +
                " (shard 1/3, fail); kept the copy from " + copy + " (the first directory given)");
  ASSERT_EQ(r.missing.size(), 2u);
  EXPECT_EQ(r.missing[0].id(), "pass-a-s7");
  EXPECT_EQ(r.missing[0].explanation, "shard 2/3 is not among the merged directories");
  EXPECT_EQ(r.merge["absent_shards"], nlohmann::json::array({"2/3"}));
  EXPECT_EQ(r.exit_code(), 1);
  const std::string table = suite_table(r);
  EXPECT_NE(table.find("  MISSING pass-b seed 7: shard 2/3 is not among the merged directories\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find(", 2 missing in "), std::string::npos) << table;
  const std::string junit = suite_junit(r);
  EXPECT_NE(junit.find("tests=\"5\" failures=\"1\" errors=\"2\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<error type=\"missing\" message=\"missing: shard 2/3 is not among the "
                       "merged directories\">"),
            std::string::npos)
      << junit;
  const auto j = suite_json(r);
  EXPECT_EQ(j["counts"]["missing"], 2);
  EXPECT_EQ(j["merge"]["missing"][1]["id"], "pass-b-s7");
}

void expect_refused(const std::vector<std::string>& dirs, const std::string& message) {
  try {
    merge_suite_dirs(dirs);
    ADD_FAILURE() << "merged; wanted: " << message;
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

void edit_summary(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(dir + "/summary.json");
  auto j = nlohmann::json::parse(in);
  edit(j);
  std::ofstream(dir + "/summary.json") << j.dump();
}

TEST(SuiteMerge, RefusesWhatIsNotOneSplitOfOneSuiteNamingTheDirectory) {
  const auto dir = merge_dir();
  write_merge_scenarios(dir + "/s");
  const auto s1 = write_shard(dir, 1, "/x/a"), s2 = write_shard(dir, 2, "/x/b");
  fs::create_directories(dir + "/empty");
  expect_refused({s1, dir + "/empty"},
                 dir +
                     "/empty: no summary.json, so not a suite result directory: the "
                     "DIR/summary.json that `faultline suite` or `faultline merge` writes (a "
                     "suite killed before its end writes none: leave the directory out and the "
                     "merge reports its shard's cases missing)");
  expect_refused({s1, s1}, s1 + ": given twice (each suite directory once)");
  for (const char* k : {"other-suite", "other-split", "other-plan", "not-json"}) {
    fs::copy(s2, dir + "/" + k);
  }
  edit_summary(dir + "/other-suite", [](auto& j) { j["suite"] = "nightly"; });
  edit_summary(dir + "/other-split", [](auto& j) { j["selection"]["shard"] = "2/4"; });
  edit_summary(dir + "/other-plan", [](auto& j) { j["selection"]["planned"].erase(0); });
  std::ofstream(dir + "/not-json/summary.json") << "{\"suite\": ";
  expect_refused({s1, dir + "/other-suite"},
                 dir + "/other-suite holds results of suite 'nightly', " + s1 +
                     " of suite 's': merge joins results of one "
                     "suite");
  expect_refused({s1, dir + "/other-split"}, dir + "/other-split is shard 2/4, " + s1 +
                                                 " is shard 1/3: the shards of one split share N");
  expect_refused({s1, dir + "/other-plan"},
                 dir + "/other-plan planned 4 cases, " + s1 +
                     " planned 5: shards of different plans (another suite file, other scenarios "
                     "or another faultline?)");
  try {
    merge_suite_dirs({s1, dir + "/not-json"});
    ADD_FAILURE() << "merged a summary that is not JSON";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir + "/not-json/summary.json: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace fl::harness
