#include "harness/cli/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "harness/launch/tools.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/suite.hpp"

namespace fl::cli {

std::string or_list(const std::vector<std::string>& names) {
  if (names.size() < 2) return fmt::format("{}", fmt::join(names, ""));
  const std::vector<std::string> head(names.begin(), names.end() - 1);
  return fmt::format("{}, or {}", fmt::join(head, ", "), names.back());
}

std::string detector_help() {
  auto names = fl::harness::baseline_detectors();
  names.push_back("baseline (all of them)");
  names.push_back("a command line");
  return "Start a detector beside the run (repeatable): " + or_list(names);
}

std::string recovery_help() {
  auto names = fl::harness::recovery_policies();
  names.push_back("a command");
  return "Start a recovery tool: " + or_list(names);
}

const char* const kSharedResultsHelp =
    "Accept a --results directory (or one above it) that another user owns or can write, with a "
    "warning; that user can then swap the run directory for their own (refused by default)";

void add_run_dir_options(CLI::App& sub, fl::harness::RunOptions& ro) {
  sub.add_option("--results", ro.results_dir, "Where run directories go")->capture_default_str();
  sub.add_flag("--allow-shared-results", ro.allow_shared_results, kSharedResultsHelp);
}

CLI::Option* add_suite_options(CLI::App& sub, std::string& suite, fl::harness::SuiteOptions& so) {
  sub.add_option("suite", suite, "Suite YAML or a directory of scenarios")->required();
  auto* jobs = sub.add_option("-j,--jobs", so.jobs, "Runs at the same time")->capture_default_str();
  sub.add_option("--results", so.results_dir, "Where suite directories go")->capture_default_str();
  return jobs;
}

}  // namespace fl::cli
