// `faultline diff OLD NEW...`: two suite results compared (several NEW: tonight's shards, merged);
// exit 1 on a regression (nightly jobs).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"
#include "harness/suite/merge.hpp"

namespace fl::cli {
namespace {

struct DiffArgs {
  std::string old_dir;
  std::vector<std::string> new_dirs;  // several: the shards of tonight's split, merged
  fl::harness::DiffOptions o;
};

nlohmann::json new_summary(const DiffArgs& a) {
  if (a.new_dirs.size() == 1) return fl::harness::load_suite_summary(a.new_dirs[0]);
  return fl::harness::suite_json(fl::harness::merge_suite_dirs(a.new_dirs));
}

int diff(const DiffArgs& a) {
  const auto d =
      fl::harness::diff_suites(fl::harness::load_suite_summary(a.old_dir), new_summary(a), a.o);
  std::printf("%s",
              fl::harness::diff_text(d, a.old_dir, fmt::format("{}", fmt::join(a.new_dirs, " + ")))
                  .c_str());
  for (const auto& e : d) {
    if (e.regression) return 1;
  }
  return 0;
}

Handler setup_diff(CLI::App& sub) {
  auto a = std::make_shared<DiffArgs>();
  sub.add_option("old", a->old_dir, "Earlier suite directory or summary JSON")->required();
  sub.add_option("new", a->new_dirs,
                 "Later suite directory or summary JSON; several suite directories (the shards "
                 "of one split) are merged first, as faultline merge merges them")
      ->required();
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
