// The lists in `faultline`'s help text against the registries they name: every baseline
// detector, recovery policy, control action and suite executor is in the help of every command
// that takes one, and the counts the help gives for the taxonomy match scenarios/taxonomy.yaml.
// A name added to a registry and missing from the help fails here.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "harness/control/controller.hpp"
#include "harness/launch/tools.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/process.hpp"

namespace {

const std::string kCli = FAULTLINE_CLI;

std::string help_of(const std::vector<std::string>& command) {
  std::vector<std::string> argv{kCli};
  argv.insert(argv.end(), command.begin(), command.end());
  argv.push_back("--help");
  const auto r = fl::test::run_process(argv);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// The rest of the help line that starts with `lead` ("" when no line has it).
std::string line_after(const std::string& help, const std::string& lead) {
  const auto at = help.find(lead);
  if (at == std::string::npos) return "";
  const auto from = at + lead.size();
  return help.substr(from, help.find('\n', from) - from);
}

// Every name as an item of `list` ("a, b, or c": each followed by "," or the end).
void expect_lists_all(const std::string& list, const std::vector<std::string>& names,
                      const std::string& where) {
  ASSERT_FALSE(names.empty()) << where;
  for (const auto& n : names) {
    const std::string item = " " + n;
    const auto at = (" " + list).find(item);
    const bool found = at != std::string::npos && (at + item.size() == list.size() + 1 ||
                                                   (" " + list)[at + item.size()] == ',');
    EXPECT_TRUE(found) << where << " lacks '" << n << "': " << list;
  }
}

TEST(CliHelp, EveryBaselineDetectorIsListedByEveryCommandThatTakesADetector) {
  const std::string lead = "Start a detector beside the run (repeatable): ";
  for (const char* command : {"run", "suite", "repro", "bench-detectors"}) {
    const auto list = line_after(help_of({command}), lead);
    expect_lists_all(list, fl::harness::baseline_detectors(), std::string(command) + " --detector");
    EXPECT_NE(list.find("baseline (all of them)"), std::string::npos) << list;
  }
}

TEST(CliHelp, EveryRecoveryPolicyIsListedByEveryCommandThatTakesARecoveryTool) {
  for (const char* command : {"run", "suite"}) {
    const auto list = line_after(help_of({command}), "Start a recovery tool: ");
    expect_lists_all(list, fl::harness::recovery_policies(), std::string(command) + " --recovery");
  }
}

TEST(CliHelp, ControlListsEveryActionTheRunAccepts) {
  const auto list = line_after(help_of({"control"}), "action TEXT REQUIRED");
  const auto names = fl::harness::control_action_names();
  expect_lists_all(list, names, "control's action");
  EXPECT_EQ(names.front(), "kill_rank");
}

TEST(CliHelp, SuiteListsEveryExecutorAndRefusesAnyOther) {
  const auto list = line_after(help_of({"suite"}), "Where the runs execute: ");
  expect_lists_all(list.substr(0, list.find(" (")), fl::harness::executor_names(),
                   "suite --executor");
  const auto r = fl::test::run_process({kCli, "suite", "x.yaml", "--executor", "pbs"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, fmt::format("faultline: --executor: pbs not in {{{}}} (faultline --help, or "
                                  "COMMAND --help)\n",
                                  fmt::join(fl::harness::executor_names(), ",")));
}

TEST(CliHelp, CatalogAndStageCountsAreTheTaxonomys) {
  const auto taxonomy =
      YAML::LoadFile(std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/taxonomy.yaml");
  size_t symptoms = 0;
  for (const auto& stage : taxonomy["stages"]) symptoms += stage["symptoms"].size();
  const size_t stages = taxonomy["stages"].size();
  const auto top = help_of({});
  EXPECT_NE(top.find("The " + std::to_string(symptoms) + " symptoms, their causes"),
            std::string::npos)
      << top;
  const auto suite = help_of({"suite"});
  EXPECT_NE(suite.find("Only symptoms of this stage, 1-" + std::to_string(stages) + " ("),
            std::string::npos)
      << suite;
  EXPECT_NE(suite.find("--stage INT:INT in [1 - " + std::to_string(stages) + "]"),
            std::string::npos)
      << suite;
}

// Each subcommand the top-level help lists answers --help with its own usage line, and the
// list a mistyped command gets is the same.
TEST(CliHelp, EverySubcommandListedAnswersItsOwnHelp) {
  const auto top = help_of({});
  const auto from = top.find("Subcommands:\n");
  ASSERT_NE(from, std::string::npos) << top;
  std::vector<std::string> names;
  for (auto at = top.find("\n  ", from); at != std::string::npos; at = top.find("\n  ", at + 1)) {
    names.push_back(top.substr(at + 3, top.find(' ', at + 3) - at - 3));
  }
  const auto r = fl::test::run_process({kCli, "frobnicate"});
  EXPECT_EQ(r.output, fmt::format("faultline: 'frobnicate' is not a command (allowed: {})\n",
                                  fmt::join(names, ", ")));
  for (const auto& n : names) {
    EXPECT_NE(help_of({n}).find("Usage: " + kCli + " " + n + " "), std::string::npos) << n;
  }
}

}  // namespace
