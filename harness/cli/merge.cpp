// `faultline merge DIR... -o DIR`: the result directories of `faultline suite --shard I/N` runs
// (or any results of one suite) as one suite directory: summary.json, junit.xml, report.html and
// metrics.prom, each case once with its shard; duplicates and missing cases reported. Exits as
// `faultline suite` would over the whole plan: 1 when a case failed or is missing, 4 when a
// shard was interrupted, 2 for bad input (docs/reports.md#faultline-merge).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "base/private_dir.hpp"
#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"
#include "harness/suite/merge.hpp"

namespace fl::cli {
namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out;
  bool force = false;
};

constexpr const char* kWritten[] = {"summary.json", "junit.xml", "report.html", "metrics.prom"};

// -o: a new directory, or with --force one whose four files are replaced; never an input.
void check_output(const MergeArgs& a) {
  std::error_code ec;
  for (const auto& d : a.dirs) {
    if (fs::exists(a.out, ec) && fs::exists(d, ec) && fs::equivalent(a.out, d, ec)) {
      throw fl::harness::UsageError(fmt::format(
          "-o {}: is one of the directories to merge ({}); the merge goes to a directory of its "
          "own",
          a.out, d));
    }
  }
  if (!fs::exists(a.out, ec)) return;
  if (!fs::is_directory(a.out, ec)) {
    throw fl::harness::UsageError(
        fmt::format("-o {}: exists and is not a directory (the merge writes a directory)", a.out));
  }
  if (!a.force) {
    throw fl::harness::UsageError(fmt::format(
        "-o {}: exists; faultline merge never overwrites results (--force replaces its "
        "summary.json, junit.xml, report.html and metrics.prom; or choose a new directory)",
        a.out));
  }
}

int merge(const MergeArgs& a) {
  check_output(a);
  fl::harness::SuiteResult r = fl::harness::merge_suite_dirs(a.dirs);
  fs::create_directories(a.out);
  r.dir = fs::absolute(a.out).lexically_normal().string();
  const std::string json =
      fl::harness::suite_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  fl::write_file_atomic(r.dir + "/summary.json", json);
  fl::write_file_atomic(r.dir + "/junit.xml", fl::harness::suite_junit(r));
  fl::write_file_atomic(r.dir + "/metrics.prom", fl::harness::prometheus_metrics({r.dir}));
  fl::harness::write_report(r.dir);
  std::printf("%s", fl::harness::suite_table(r).c_str());
  std::printf("merged %zu directories of suite %s into %s (", a.dirs.size(), r.name.c_str(),
              r.dir.c_str());
  for (size_t i = 0; i < std::size(kWritten); ++i) std::printf("%s%s", i ? ", " : "", kWritten[i]);
  std::printf(")\n");
  const auto absent = r.merge.value("absent_shards", nlohmann::json::array());
  for (const auto& s : absent) {
    std::printf("  ABSENT shard %s: no directory given for it\n", s.get<std::string>().c_str());
  }
  const int code = r.exit_code();
  return code == 0 && !absent.empty() ? 1 : code;
}

Handler setup_merge(CLI::App& sub) {
  auto a = std::make_shared<MergeArgs>();
  sub.add_option("dirs", a->dirs,
                 "Suite directories: the shards of one `faultline suite --shard I/N` split, or "
                 "any results of one suite")
      ->required();
  sub.add_option("-o,--output", a->out, "The merged suite directory (must not exist)")->required();
  sub.add_flag("--force", a->force, "Replace the merged files in an existing -o directory");
  return [a] { return merge(*a); };
}

}  // namespace

const Command& merge_command() {
  static const Command c{"merge",
                         "Merge suite results (the shards of --shard I/N) into one suite directory",
                         setup_merge};
  return c;
}

}  // namespace fl::cli
