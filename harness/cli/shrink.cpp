// `faultline shrink RUN_DIR`: reduce a run that shows a property violation to a minimal scenario
// that still shows it (docs/benchmarks.md#campaigns-and-shrinking).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <fmt/ranges.h>

#include "harness/campaign/shrink.hpp"
#include "harness/cli/command.hpp"

namespace fl::cli {
namespace {

struct ShrinkArgs {
  fl::harness::campaign::ShrinkOptions o;
  bool quiet = false;
};

int shrink(ShrinkArgs& a) {
  a.o.progress = !a.quiet;
  const auto r = fl::harness::campaign::shrink_run(a.o);
  std::printf("%s", r.text().c_str());
  return 0;
}

Handler setup_shrink(CLI::App& sub) {
  auto a = std::make_shared<ShrinkArgs>();
  sub.add_option("run_dir", a->o.run_dir, "A finished run's directory")->required();
  sub.add_option("-o,--out", a->o.out_file,
                 "Where the minimal scenario goes (default "
                 "WORK/minimal.yaml)");
  sub.add_option("--max-runs", a->o.max_runs, "Most candidate runs")->capture_default_str();
  sub.add_option("--property", a->o.property,
                 fmt::format("The violation to keep ({}, detector_missed:NAME; default: the "
                             "first the run shows)",
                             fmt::join(fl::harness::campaign::property_names(), ", ")));
  sub.add_option("--work", a->o.work_dir, "Where candidates run (default RUN_DIR-shrink)");
  sub.add_flag("-q,--quiet", a->quiet, "No line per candidate");
  return [a] { return shrink(*a); };
}

}  // namespace

const Command& shrink_command() {
  static const Command c{"shrink",
                         "Reduce a run with a property violation to a minimal scenario (ddmin)",
                         setup_shrink};
  return c;
}

}  // namespace fl::cli
