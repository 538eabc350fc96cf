// `faultline diff OLD NEW`: two suite results compared; exit 1 on a regression (nightly jobs).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"

namespace fl::cli {
namespace {

struct DiffArgs {
  std::string old_dir, new_dir;
  fl::harness::DiffOptions o;
};

int diff(const DiffArgs& a) {
  const auto d = fl::harness::diff_suites(fl::harness::load_suite_summary(a.old_dir),
                                          fl::harness::load_suite_summary(a.new_dir), a.o);
  std::printf("%s", fl::harness::diff_text(d, a.old_dir, a.new_dir).c_str());
  for (const auto& e : d) {
    if (e.regression) return 1;
  }
  return 0;
}

Handler setup_diff(CLI::App& sub) {
  auto a = std::make_shared<DiffArgs>();
  sub.add_option("old", a->old_dir, "Earlier suite directory or summary JSON")->required();
  sub.add_option("new", a->new_dir, "Later suite directory or summary JSON")->required();
  sub.add_option("--time-ratio", a->o.time_ratio,
                 "Time to symptom this many times slower is a regression")
      ->capture_default_str();
  sub.add_option("--time-min-s", a->o.time_min_s, "...and at least this much slower")
      ->capture_default_str();
  sub.add_option("--throughput-ratio", a->o.throughput_ratio,
                 "Clean tokens/s below this share of before is a regression")
      ->capture_default_str();
  sub.add_flag("--outcomes-only", a->o.outcomes_only,
               "Compare outcomes only (no timing or throughput)");
  return [a] { return diff(*a); };
}

}  // namespace

const Command& diff_command() {
  static const Command c{"diff", "Compare two suite results; exit 1 on a regression (nightly jobs)",
                         setup_diff};
  return c;
}

}  // namespace fl::cli
