// `faultline report DIR`: a self-contained HTML report of a run or a suite (--runs: and of every
// run of the suite).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"
#include "harness/suite/suite.hpp"

namespace fl::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> dirs;
  std::string out;
  bool runs = false;
};

// --runs: the report of every run a suite directory's summary names.
void write_run_reports(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/summary.json")) return;
  const auto summary = fl::harness::load_suite_summary(dir);
  for (const auto& c : summary["cases"]) {
    const std::string d = c.value("run_dir", "");
    if (!d.empty() && std::filesystem::exists(d + "/history.jsonl")) fl::harness::write_report(d);
  }
}

int report(const ReportArgs& a) {
  if (a.runs) {
    for (const auto& d : a.dirs) write_run_reports(d);
  }
  if (a.dirs.size() == 1) {
    std::printf("%s\n", fl::harness::write_report(a.dirs[0], a.out).c_str());
    return 0;
  }
  if (a.out.empty()) {
    throw fl::harness::UsageError(
        "report: several suite directories are merged into one page: -o FILE names it (nothing "
        "is written into the directories; `faultline merge DIR... -o DIR` keeps a merged "
        "directory)");
  }
  std::printf("%s\n", fl::harness::write_merged_report(a.dirs, a.out).c_str());
  return 0;
}

Handler setup_report(CLI::App& sub) {
  auto a = std::make_shared<ReportArgs>();
  sub.add_option("dir", a->dirs,
                 "Run directory or suite directory; several suite directories (the shards of "
                 "one suite) are merged into one page")
      ->required();
  sub.add_option("-o,--output", a->out,
                 "HTML file (default: DIR/report.html; required with several directories)");
  sub.add_flag("--runs", a->runs, "Suite: also write every run's report");
  return [a] { return report(*a); };
}

}  // namespace

const Command& report_command() {
  static const Command c{"report",
                         "Write a self-contained HTML report of a run or a suite (report.html)",
                         setup_report};
  return c;
}

}  // namespace fl::cli
