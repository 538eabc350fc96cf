#include "harness/score/soak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "base/private_dir.hpp"
#include "harness/history/history.hpp"
#include "harness/run/runner.hpp"
#include "harness/score/score.hpp"

namespace fl::harness {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double parse_duration(const std::string& text) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || !(v > 0)) {
    raise<UsageError>("--for '{}': a duration above 0 such as 2h, 90m, 45s or 3600 (seconds)",
                      text);
  }
  return v * scale;
}

namespace {

// Training steps a run completed: its highest step plus one.
int64_t steps_of(const std::string& run_dir) {
  int64_t top = -1;
  for (const auto& e : read_history(run_dir + "/history.jsonl")) {
    if (e.kind == "step" && e.source == "rank") top = std::max(top, e.step);
  }
  return top + 1;
}

struct SoakTally {
  int rounds = 0, runs = 0, not_clean = 0;
  int64_t steps = 0;
  std::vector<std::string> bad;
};

SuiteOptions round_options(const SoakOptions& o, const std::string& dir, int round) {
  SuiteOptions so = o.suite_options;
  so.results_dir = dir;
  so.name_suffix = fmt::format("-round{}", round);
  so.select.seeds = {o.first_seed + static_cast<uint64_t>(round)};
  so.retries = 0;
  for (const auto& d : o.detectors) so.run_args.insert(so.run_args.end(), {"--detector", d});
  if (o.run_steps > 0) {
    // Longer runs need a longer run timeout than the scenarios' (120 s by default): 3 s a step
    // covers the small model's step on a 2-core machine under heavy load (0.6 s measured).
    const int run_s = std::clamp(60 + 3 * o.run_steps, 120, 86400);
    so.run_args.insert(so.run_args.end(), {"--set", fmt::format("workload.steps={}", o.run_steps),
                                           "--set", fmt::format("timeouts.run_s={}", run_s)});
  }
  return so;
}

bool budget_left(const SoakOptions& o, const SoakTally& t, Clock::time_point start) {
  if (o.max_rounds > 0 && t.rounds >= o.max_rounds) return false;
  if (o.for_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() >= o.for_s) {
    return false;
  }
  if (o.steps > 0 && t.steps >= o.steps) return false;
  return o.for_s > 0 || o.steps > 0 || o.max_rounds > 0;
}

std::string soak_markdown(const SoakOptions& o, const SoakTally& t, double wall_s,
                          const std::vector<DetectorScore>& scores) {
  const double hours = scores.empty() ? 0 : scores.front().clean_hours;
  std::string md = fmt::format(
      "# Clean soak: {}\n\n{} rounds, {} runs ({} not clean, excluded), {} training steps, "
      "{} jobs side by side; wall {:.2f} h; **clean hours behind every FP figure: {:.3f} h** "
      "(the runs' durations summed).\n\n",
      o.suite, t.rounds, t.runs, t.not_clean, t.steps, o.suite_options.jobs, wall_s / 3600, hours);
  for (const auto& b : t.bad) md += "- not clean: " + b + "\n";
  return md + "\n" + scores_table(scores, true);
}

}  // namespace

int soak(const SoakOptions& o) {
  if (o.for_s <= 0 && o.steps <= 0 && o.max_rounds <= 0) {
    raise<UsageError>("soak: say how long: --for DURATION, --steps N or --rounds N");
  }
  make_private_dir(o.suite_options.results_dir, "--results", o.suite_options.allow_shared_results);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  const std::string dir = make_unique_dir(
      o.suite_options.results_dir, fmt::format("{:%Y%m%d-%H%M%S}-soak", fmt::localtime(now)));
  const auto start = Clock::now();
  SoakTally t;
  while (budget_left(o, t, start)) {
    const SuiteResult r = run_suite(o.suite, round_options(o, dir, t.rounds));
    ++t.rounds;
    for (const auto& c : r.cases) {
      ++t.runs;
      if (c.outcome != "pass") {
        ++t.not_clean;
        t.bad.push_back(fmt::format("{} ({}): {}", c.id(), c.outcome, c.explanation));
      }
      if (!c.run_dir.empty() && fs::exists(c.run_dir + "/history.jsonl"))
        t.steps += steps_of(c.run_dir);
    }
    std::fprintf(stderr, "soak: round %d done, %d runs, %lld steps, %.0f s\n", t.rounds, t.runs,
                 static_cast<long long>(t.steps),
                 std::chrono::duration<double>(Clock::now() - start).count());
    if (!r.interrupted.empty()) break;
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<RunTruth> runs;
  for (const auto& d : collect_run_dirs({dir})) runs.push_back(load_run_truth(d));
  const auto scores = score_detectors(runs);
  std::printf("\n%s", scores_table(scores, false).c_str());
  const std::string md = soak_markdown(o, t, wall_s, scores);
  write_atomic(dir + "/soak.md", md);
  write_atomic(dir + "/soak.json",
               nlohmann::json{{"suite", o.suite},
                              {"rounds", t.rounds},
                              {"runs", t.runs},
                              {"not_clean", t.not_clean},
                              {"steps", t.steps},
                              {"jobs", o.suite_options.jobs},
                              {"wall_s", wall_s},
                              {"clean_hours", scores.empty() ? 0.0 : scores.front().clean_hours},
                              {"detectors", scores_json(scores)}}
                       .dump(2) +
                   "\n");
  std::printf("soak: %s/soak.md, %s/soak.json\n", dir.c_str(), dir.c_str());
  return t.not_clean == 0 ? 0 : 1;
}

}  // namespace fl::harness
