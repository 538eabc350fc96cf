// `faultline score RUN|SUITE...`: the detectors' scores against each run's ground truth
// (docs/detectors.md).
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/cli/command.hpp"
#include "harness/score/bench.hpp"

namespace fl::cli {
namespace {

struct ScoreArgs {
  std::vector<std::string> paths;
  std::string json;
  bool markdown = false;
};

Handler setup_score(CLI::App& sub) {
  auto a = std::make_shared<ScoreArgs>();
  sub.add_option("paths", a->paths, "Run directories or suite directories")->required();
  sub.add_flag("--markdown", a->markdown, "Markdown table");
  sub.add_option("--json", a->json, "Also write the scores as JSON to this file");
  return [a] { return fl::harness::score_paths(a->paths, a->markdown, a->json); };
}

}  // namespace

const Command& score_command() {
  static const Command c{
      "score", "Score the detectors of finished runs or suites against their ground truth",
      setup_score};
  return c;
}

}  // namespace fl::cli
