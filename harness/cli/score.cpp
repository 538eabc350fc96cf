// `faultline score RUN|SUITE...`: the detectors' scores against each run's ground truth, with 95%
// intervals (docs/detectors.md); `--offline`: the detectors run again on recorded runs or an
// exported dataset, fed over the control plane faster than real time (docs/dataset.md).
#include <CLI/CLI.hpp>

#include <memory>

#include "base/error.hpp"
#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/score/bench.hpp"
#include "harness/score/offline.hpp"

namespace fl::cli {
namespace {

struct ScoreArgs {
  std::vector<std::string> paths;
  std::string json;
  bool markdown = false;
  bool offline = false;
  bool breakdown = false;
  fl::harness::OfflineOptions off;
  std::vector<std::string> compare;
};

int score(ScoreArgs& a) {
  if (!a.compare.empty() && a.compare.size() != 2) {
    throw fl::ConfigError("--compare takes two detectors, e.g. --compare logs,comm");
  }
  if (!a.offline) {
    return fl::harness::score_paths(a.paths, a.markdown, a.json, a.compare, a.breakdown);
  }
  a.off.paths = a.paths;
  a.off.markdown = a.markdown;
  a.off.json_path = a.json;
  a.off.compare = a.compare;
  return fl::harness::score_offline(a.off);
}

Handler setup_score(CLI::App& sub) {
  auto a = std::make_shared<ScoreArgs>();
  sub.add_option("paths", a->paths, "Run, suite or dataset directories")->required();
  sub.add_flag("--markdown", a->markdown, "Markdown table");
  sub.add_option("--json", a->json, "Also write the scores as JSON to this file");
  sub.add_option("--compare", a->compare,
                 "Two detectors: McNemar's exact test and a paired latency bootstrap on the same "
                 "runs")
      ->delimiter(',');
  sub.add_flag("--breakdown", a->breakdown, "Also recall per stage and per symptom");
  sub.add_flag("--offline", a->offline,
               "Replay the recorded histories to the detectors over the control plane instead of "
               "reading their recorded diagnoses");
  sub.add_option("--detector", a->off.detectors, "--offline: " + detector_help())
      ->capture_default_str();
  sub.add_option("--speed", a->off.speed, "--offline: harness seconds per wall second")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub.add_option("--replays", a->off.results_dir, "--offline: where the replayed runs go")
      ->capture_default_str();
  sub.add_flag("--check-live", a->off.check_live,
               "--offline: compare every run's scoring record with the live one (exit 1 if any "
               "differs)");
  return [a] { return score(*a); };
}

}  // namespace

const Command& score_command() {
  static const Command c{
      "score", "Score the detectors of finished runs or suites against their ground truth",
      setup_score};
  return c;
}

}  // namespace fl::cli
