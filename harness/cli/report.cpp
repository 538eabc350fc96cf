// `faultline report DIR`: a self-contained HTML report of a run or a suite (--runs: and of every
// run of the suite).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"

namespace fl::cli {
namespace {

struct ReportArgs {
  std::string dir, out;
  bool runs = false;
};

int report(const ReportArgs& a) {
  if (a.runs && std::filesystem::exists(a.dir + "/summary.json")) {
    const auto summary = fl::harness::load_suite_summary(a.dir);
    for (const auto& c : summary["cases"]) {
      const std::string d = c.value("run_dir", "");
      if (!d.empty() && std::filesystem::exists(d + "/history.jsonl")) {
        fl::harness::write_report(d);
      }
    }
  }
  std::printf("%s\n", fl::harness::write_report(a.dir, a.out).c_str());
  return 0;
}

Handler setup_report(CLI::App& sub) {
  auto a = std::make_shared<ReportArgs>();
  sub.add_option("dir", a->dir, "Run directory or suite directory")->required();
  sub.add_option("-o,--output", a->out, "HTML file (default: DIR/report.html)");
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
