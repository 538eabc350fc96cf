// `faultline status RUN_DIR|SUITE_DIR [--json]`: the job-wide status in the spirit of NCCL's RAS
// (docs/harness.md#job-status): ranks alive, each rank's last step, the collective it is in and
// for how long, who is missing, the faults fired. A running run is read as of now (its history
// reaches the file within a tick), a finished one as of when it was stopped. A suite directory
// gives one line per run and the table of every run still going.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "harness/cli/command.hpp"
#include "harness/history/job_status.hpp"

namespace fl::cli {
namespace {

namespace fs = std::filesystem;

struct StatusArgs {
  std::string dir;
  bool json = false;
};

std::string outcome_of(const std::string& run_dir) {
  const auto v = read_json_file(run_dir + "/verdict.json").value_or(nlohmann::json());
  if (!v.is_object()) return "no verdict";
  return v.value("state", std::string()) == "running" ? "running"
                                                      : v.value("outcome", std::string("?"));
}

std::string run_line(const std::string& id, const std::string& outcome,
                     const fl::harness::JobStatus& s) {
  const auto missing = s.missing();
  return fmt::format(
      "{:<44} {:<12} step {:>4}  alive {}/{}{}\n", id, outcome, s.max_step(), s.alive().size(),
      s.world, missing.empty() ? "" : fmt::format("  missing rank(s) {}", fmt::join(missing, ",")));
}

int suite_status(const StatusArgs& a) {
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(a.dir + "/runs")) {
    if (e.is_directory() && fs::exists(e.path() / "history.jsonl")) runs.push_back(e.path());
  }
  std::sort(runs.begin(), runs.end());
  nlohmann::json all = nlohmann::json::array();
  std::string lines, tables;
  for (const auto& r : runs) {
    const auto s = fl::harness::run_dir_status(r.string());
    const std::string outcome = outcome_of(r.string());
    all.push_back({{"run", r.filename().string()},
                   {"outcome", outcome},
                   {"status", fl::harness::status_json(s)}});
    lines += run_line(r.filename().string(), outcome, s);
    if (outcome == "running") tables += "\n" + fl::harness::status_text(s);
  }
  if (a.json) {
    const nlohmann::json j = {{"suite", fs::path(a.dir).filename().string()}, {"runs", all}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("suite      %s: %zu run(s)\n%s%s", a.dir.c_str(), runs.size(), lines.c_str(),
                tables.c_str());
  }
  return 0;
}

int status(const StatusArgs& a) {
  if (fs::exists(a.dir + "/history.jsonl")) {
    const auto s = fl::harness::run_dir_status(a.dir);
    if (a.json) {
      std::printf("%s\n", fl::harness::status_json(s)
                              .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
    } else {
      std::printf("%s", fl::harness::status_text(s).c_str());
    }
    return 0;
  }
  if (fs::is_directory(a.dir + "/runs")) return suite_status(a);
  throw ConfigError(
      fmt::format("{}: neither a run directory (no history.jsonl) nor a suite "
                  "directory (no runs/)",
                  a.dir));
}

Handler setup_status(CLI::App& sub) {
  auto a = std::make_shared<StatusArgs>();
  sub.add_option("dir", a->dir, "A run directory (results/runs/<id>) or a suite directory")
      ->required();
  sub.add_flag("--json", a->json, "JSON output");
  return [a] { return status(*a); };
}

}  // namespace

const Command& status_command() {
  static const Command c{"status",
                         "Ranks alive, steps, collectives in flight and missing ranks of a run "
                         "or suite, running or finished",
                         setup_status};
  return c;
}

}  // namespace fl::cli
