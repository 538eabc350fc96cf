// `faultline soak [SUITE] --for 2h|--steps N|--rounds N -j J`: fault-free runs with decoys only,
// round after round with new seeds, detectors attached, false alarms over the clean hours
// (docs/benchmarks.md, "Clean soak").
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/score/soak.hpp"

namespace fl::cli {
namespace {

struct SoakArgs {
  fl::harness::SoakOptions o;
  std::string for_text;
};

Handler setup_soak(CLI::App& sub) {
  auto a = std::make_shared<SoakArgs>();
  a->o.suite_options.results_dir = "results/soak";
  sub.add_option("suite", a->o.suite, "Suite of fault-free scenarios")->capture_default_str();
  sub.add_option("--for", a->for_text, "Wall-clock budget (2h, 90m, 45s): no round starts after");
  sub.add_option("--steps", a->o.steps, "Stop once the runs completed this many training steps");
  sub.add_option("--rounds", a->o.max_rounds, "At most this many rounds");
  sub.add_option("--run-steps", a->o.run_steps, "workload.steps of every run (0: the scenario's)")
      ->capture_default_str();
  sub.add_option("--first-seed", a->o.first_seed, "Round k runs with seed first-seed + k")
      ->capture_default_str();
  sub.add_option("--detector", a->o.detectors, detector_help())->capture_default_str();
  sub.add_option("-j,--jobs", a->o.suite_options.jobs, "Runs side by side")->capture_default_str();
  sub.add_option("--results", a->o.suite_options.results_dir, "Where the soak directory goes")
      ->capture_default_str();
  return [a] {
    if (!a->for_text.empty()) a->o.for_s = fl::harness::parse_duration(a->for_text);
    return fl::harness::soak(a->o);
  };
}

}  // namespace

const Command& soak_command() {
  static const Command c{
      "soak", "Fault-free runs with decoys for hours: false alarms per clean hour", setup_soak};
  return c;
}

}  // namespace fl::cli
