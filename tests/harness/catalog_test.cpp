// The catalogue (every taxonomy symptom described, with causes, fixes and its scenarios; broken
// catalogues named precisely) and suites through the CLI: faulty and fix variants run in
// parallel, a summary table, JUnit XML and JSON that count a failed expectation; `faultline
// repro` reports REPRODUCED / FIX VERIFIED.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness/catalog/catalog.hpp"
#include "harness/model/scenario.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kSource = FAULTLINE_SOURCE_DIR;

std::string test_dir() {
  return test::fresh_test_dir("catalog",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

TEST(Catalog, DescribesEveryTaxonomySymptomAndFindsTheShippedScenarios) {
  auto entries = load_catalog(kSource + "/scenarios/catalog.yaml", kSource + "/scenarios/symptoms");
  ASSERT_EQ(entries.size(), 34u);
  int covered = 0;
  for (const auto& e : entries) {
    EXPECT_FALSE(e.about.empty()) << e.id;
    EXPECT_FALSE(e.causes.empty()) << e.id;
    EXPECT_FALSE(e.fixes.empty()) << e.id;
    for (const auto& s : e.scenarios) {
      EXPECT_EQ(s.symptom, e.id);
      EXPECT_TRUE(s.has_fix) << s.file << ": a symptom scenario needs a fix variant";
    }
    covered += e.scenarios.empty() ? 0 : 1;
  }
  EXPECT_GE(covered, 8);
  auto hang = std::find_if(entries.begin(), entries.end(), [](auto& e) { return e.id == "4.11"; });
  EXPECT_EQ(hang->scenarios.size(), 2u);
  const std::string table = catalog_table(entries);
  EXPECT_NE(table.find(fmt::format("{} of 34 symptoms have a scenario", covered)),
            std::string::npos)
      << table;
  EXPECT_EQ(catalog_json(entries).size(), 34u);
}

TEST(Catalog, ShowsAStandsForReferenceAsAMechanismNotAsACitation) {
  const auto symptoms =
      load_catalog(kSource + "/scenarios/catalog.yaml", kSource + "/scenarios/symptoms");
  const auto issues =
      load_catalog(kSource + "/scenarios/catalog.yaml", kSource + "/scenarios/issues");
  const std::string table = references_table(symptoms) + references_table(issues);
  EXPECT_NE(table.find("jit-build-no-compiler                              issue "
                       "deepspeedai/DeepSpeed#1649\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("lr-scheduler-stepped-on-a-subset-of-ranks          pr "
                       "NVIDIA/Megatron-LM#5331\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("model-parallel-larger-than-world                   stands for: a launch "
                       "line that asks for a tensor-parallel size larger than the number of "
                       "ranks launched"),
            std::string::npos)
      << table;
  // A mechanism line names no thread.
  for (size_t at = table.find("stands for: "); at != std::string::npos;
       at = table.find("stands for: ", at + 1)) {
    const std::string line = table.substr(at, table.find('\n', at) - at);
    EXPECT_EQ(line.find('#'), std::string::npos) << line;
  }
  EXPECT_NE(table.find(" stand for a mechanism, "), std::string::npos) << table;
  bool seen = false;
  for (const auto& e : catalog_json(issues)) {
    for (const auto& s : e["scenarios"]) {
      if (s["name"] != "zero1-oom-fixed-by-zero2") continue;
      seen = true;
      EXPECT_EQ(s["reference_kind"], "stands-for");
      EXPECT_EQ(s["issue"], "");
      EXPECT_EQ(s["pr"], "");
      EXPECT_NE(s["mechanism"].get<std::string>().find("ZeRO-2 reduces each gradient bucket"),
                std::string::npos);
    }
  }
  EXPECT_TRUE(seen);
}

TEST(Catalog, ErrorsNameTheFileTheSymptomAndWhatIsAllowed) {
  const auto dir = test_dir();
  std::ifstream in(kSource + "/scenarios/catalog.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto cut = text.find("  \"5.11\"");
  ASSERT_NE(cut, std::string::npos);
  std::ofstream(dir + "/missing.yaml") << text.substr(0, cut);
  try {
    load_catalog(dir + "/missing.yaml", dir);
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("symptom 5.11 (Import error) has no entry"),
              std::string::npos)
        << e.what();
  }
  std::string bad = text;
  bad.replace(bad.find("causes: [R5.3, R5.4]"), 20, "causes: [R5.3, R9.9]");
  std::ofstream(dir + "/bad.yaml") << bad;
  try {
    load_catalog(dir + "/bad.yaml", dir);
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown root cause 'R9.9' (allowed: R1.1"),
              std::string::npos)
        << e.what();
  }
}

TEST(Suite, RunsBothVariantsInParallelAndReportsAFailedExpectation) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/scenarios");
  fs::copy_file(kSource + "/scenarios/symptoms/2.1-world-size-mismatch.yaml",
                dir + "/scenarios/a.yaml");
  std::ofstream(dir + "/scenarios/b.yaml") << "name: never-seen\n"
                                              "topology: {ranks: 1}\n"
                                              "workload: {steps: 1}\n"
                                              "expect: {oracle: error_signature, pattern: "
                                              "\"this line is never printed\"}\n";
  // A "fix" that leaves the cause in place: the symptom is still there, so it is not verified.
  std::ofstream(dir + "/scenarios/c.yaml")
      << "name: fix-that-is-not\n"
         "topology: {ranks: 2}\n"
         "workload: {steps: 2}\n"
         "faults:\n  - env: {set: {WORLD_SIZE: \"3\"}}\n    rank: 1\n"
         "timeouts: {rendezvous_ms: 3000}\n"
         "expect: {symptom: \"2.1\", oracle: error_signature, pattern: \"world size mismatch\"}\n"
         "fix: {expect: {absent: true}}\n";
  auto r = test::run_process({FAULTLINE_CLI, "suite", dir + "/scenarios", "-j", "2", "--results",
                              dir + "/out", "--junit", dir + "/j.xml", "--json", dir + "/s.json"},
                             {}, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("world-size-mismatch                      7  yes         yes"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("FAILED never-seen seed 7: no rank printed a line matching"),
            std::string::npos)
      << r.output;
  std::ifstream j(dir + "/j.xml");
  const std::string junit((std::istreambuf_iterator<char>(j)), {});
  EXPECT_NE(
      r.output.find("2.1    fix-that-is-not                          7  yes         NO (fail)"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("FAILED fix-that-is-not [fix] seed 7: the symptom is still there: "
                          "output matched"),
            std::string::npos)
      << r.output;
  EXPECT_NE(junit.find("tests=\"5\" failures=\"2\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("name=\"world-size-mismatch [fix] seed 7\""), std::string::npos) << junit;
  std::ifstream s(dir + "/s.json");
  auto summary = nlohmann::json::parse(s);
  EXPECT_EQ(summary["runs"], 5);
  EXPECT_EQ(summary["failed"], 2);
  // A suite file with a glob that matches nothing is an input error naming it.
  std::ofstream(dir + "/suite.yaml") << "name: x\nscenarios: [\"nothing/*.yaml\"]\n";
  auto bad = test::run_process({FAULTLINE_CLI, "suite", dir + "/suite.yaml"}, {},
                               std::chrono::seconds(30));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("suite.yaml:2:13: scenarios: 'nothing/*.yaml' matches no file"),
            std::string::npos)
      << bad.output;
}

TEST(Suite, ReproSaysReproducedAndFixVerified) {
  const auto dir = test_dir();
  auto r = test::run_process(
      {FAULTLINE_CLI, "repro", kSource + "/scenarios/symptoms/2.1-world-size-mismatch.yaml",
       "--results", dir},
      {}, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("REPRODUCED      symptom 2.1: output matched"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("FIX VERIFIED    not observed (no rank printed a line matching"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fl::harness
