// `faultline verdict RUN_DIR`: judge a finished (or killed) run again from its history and its
// ranks' own event files; rewrites nothing. Exit as `run` would for that outcome.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "harness/cli/command.hpp"
#include "harness/run/runner.hpp"

namespace fl::cli {
namespace {

struct VerdictArgs {
  std::string run_dir;
  bool json = false;
};

int verdict(const VerdictArgs& a) {
  fl::harness::RecoveredHistory seen;
  const auto v = fl::harness::judge_run_dir(a.run_dir, &seen);
  if (a.json) {
    auto j = v.to_json();
    j["rank_events"] = seen.rank_events;
    j["recovered_from_rank_files"] = seen.recovered;
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s (oracle %s): %s\n", v.outcome.c_str(), v.oracle.c_str(), v.explanation.c_str());
    if (seen.recovered > 0) {
      std::printf(
          "(judged with %d rank events from ranks/*/events.jsonl that the history "
          "lacks)\n",
          seen.recovered);
    }
  }
  return fl::harness::outcome_exit_code(v.outcome);
}

Handler setup_verdict(CLI::App& sub) {
  auto a = std::make_shared<VerdictArgs>();
  sub.add_option("run_dir", a->run_dir, "results/runs/<id>")->required();
  sub.add_flag("--json", a->json, "JSON output");
  return [a] { return verdict(*a); };
}

}  // namespace

const Command& verdict_command() {
  static const Command c{"verdict", "Judge a run again from its history", setup_verdict};
  return c;
}

}  // namespace fl::cli
