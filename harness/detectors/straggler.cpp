// fl-detect-straggler: step time against the run's own baseline. In synchronous training every
// rank's step takes as long as the slowest, so the slowdown shows on all of them; the straggler is
// the rank that waits least: it reports fewest collectives stalled in flight, since the others
// wait for it there.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-straggler: step time well above the run's baseline"};
  double factor = 2.5;
  double min_extra_s = 0.05;
  int baseline_steps = 5, window = 4;
  app.add_option("--factor", factor, "Slowdown that is a finding")->capture_default_str();
  app.add_option("--min-extra-s", min_extra_s,
                 "...and at least this much slower, seconds (millisecond steps jitter by 5x "
                 "under CPU contention)")
      ->capture_default_str();
  app.add_option("--baseline-steps", baseline_steps, "Steps after the first that set the baseline")
      ->capture_default_str();
  app.add_option("--window", window, "Recent steps that must all be slow")->capture_default_str();
  return tool_main(app, argc, argv, "straggler", [&](Tool& tool) {
    std::map<int64_t, double> step_time;  // slowest rank per step
    std::map<int, int> stalls;            // stall reports per rank since the baseline
    int incarnation = 0;
    auto on_event = [&](const Event& e) {
      if (tool.view().incarnation != incarnation) {
        incarnation = tool.view().incarnation;
        step_time.clear();
        stalls.clear();
      }
      if (e.source != "rank") return;
      if (e.kind == "collective" && e.data.contains("in_flight_ms")) ++stalls[e.rank];
      if (e.kind != "step" || e.step < 1) return;
      double& t = step_time[e.step];
      t = std::max(t, e.data.value("step_time_s", 0.0));
      if (static_cast<int>(step_time.size()) < baseline_steps + window) return;
      std::vector<double> base, recent;
      for (auto& [s, v] : step_time) {
        if (static_cast<int>(base.size()) < baseline_steps) base.push_back(v);
      }
      auto it = step_time.rbegin();
      // The newest step may still be incomplete (other ranks not reported): skip it.
      for (++it; it != step_time.rend() && static_cast<int>(recent.size()) < window; ++it) {
        recent.push_back(it->second);
      }
      // Sustained: every recent step is slow, not just a blip that a median would let through.
      const double b = median(base), r = median(recent);
      const double fastest_recent = *std::min_element(recent.begin(), recent.end());
      if (b <= 0 || fastest_recent < factor * b || fastest_recent - b < min_extra_s) {
        return;
      }
      const RunView& v = tool.view();
      std::vector<int> ranks;
      if (!stalls.empty()) {
        int fewest = 1 << 30;
        for (auto& [rk, st] : v.ranks) fewest = std::min(fewest, stalls.count(rk) ? stalls[rk] : 0);
        for (auto& [rk, st] : v.ranks) {
          if ((stalls.count(rk) ? stalls[rk] : 0) == fewest) ranks.push_back(rk);
        }
        if (ranks.size() == v.ranks.size()) ranks.clear();
      }
      Finding f;
      f.symptom = v.workload == "infer" ? "5.4" : "4.1";
      f.ranks = ranks;
      f.step = e.step;
      f.confidence = ranks.empty() ? 0.5 : 0.7;
      f.evidence = fmt::format(
          "median step time {:.3f} s over the last {} steps is {:.1f}x the "
          "baseline {:.3f} s; ranks waiting least: [{}]",
          r, recent.size(), r / b, b, fmt::join(ranks, ","));
      f.key = fmt::format("slow|{}", incarnation);
      tool.report(f);
    };
    tool.run(on_event);
  });
}
