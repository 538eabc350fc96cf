// `faultline bench-detectors SUITE`: run a suite with detectors attached and write their
// leaderboard (docs/detectors.md).
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/score/bench.hpp"

namespace fl::cli {
namespace {

Handler setup_bench_detectors(CLI::App& sub) {
  auto o = std::make_shared<fl::harness::BenchDetectorsOptions>();
  add_suite_options(sub, o->suite, o->suite_options);
  sub.add_option("--detector", o->detectors, detector_help())->capture_default_str();
  sub.add_option("--sweep", o->sweep, "A detector and its knob to sweep, e.g. \"hang --floor-s\"");
  sub.add_option("--values", o->values, "The knob's values (one detector per value)")
      ->delimiter(',');
  sub.add_option("--soak", o->soak,
                 "Soak directories (faultline soak) whose clean runs join the false-alarm figures");
  return [o] { return fl::harness::bench_detectors(*o); };
}

}  // namespace

const Command& bench_detectors_command() {
  static const Command c{"bench-detectors",
                         "Run a suite with detectors attached and write their leaderboard",
                         setup_bench_detectors};
  return c;
}

}  // namespace fl::cli
