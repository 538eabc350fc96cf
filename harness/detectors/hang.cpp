// fl-detect-hang: no step progress for longer than an adaptive timeout while ranks are alive.
// The timeout is max(floor, k x median step interval seen so far); before the first step the
// startup timeout applies. Localisation, in order: ranks whose heartbeats stopped (a frozen
// process), ranks that already left while peers wait, ranks behind the others, ranks that did not
// report a stalled collective while others did.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-hang: step progress stops while ranks are alive"};
  double floor_s = 5, k = 10, startup_s = 30, stale_s = 3;
  app.add_option("--floor-s", floor_s, "Shortest timeout, seconds")->capture_default_str();
  app.add_option("--k", k, "Timeout = k x median step interval")->capture_default_str();
  app.add_option("--startup-s", startup_s, "Timeout before the first step")->capture_default_str();
  app.add_option("--stale-s", stale_s, "A rank without any event this long is frozen")
      ->capture_default_str();
  return tool_main(app, argc, argv, "hang", [&](Tool& tool) {
    std::vector<double> intervals;
    int64_t progress_ns = -1, top_step = -1;
    int incarnation = 0;
    std::set<int> stalled;  // ranks that reported a collective in flight since the last progress
    auto on_event = [&](const Event& e) {
      if (tool.view().incarnation != incarnation) {
        incarnation = tool.view().incarnation;
        progress_ns = -1;
        top_step = -1;
        stalled.clear();
      }
      if (e.kind == "launch" && progress_ns < 0) progress_ns = e.t_ns;
      if (e.kind == "step" && e.step > top_step) {
        if (top_step >= 0 && progress_ns >= 0) intervals.push_back((e.t_ns - progress_ns) / 1e9);
        top_step = e.step;
        progress_ns = e.t_ns;
        stalled.clear();
      }
      if (e.kind == "collective" && e.data.contains("in_flight_ms")) stalled.insert(e.rank);
    };
    auto on_tick = [&](int64_t now) {
      const RunView& v = tool.view();
      if (progress_ns < 0 || v.ending) return;
      const auto alive = v.alive();
      if (alive.empty()) return;
      const double timeout = top_step < 0 ? startup_s : std::max(floor_s, k * median(intervals));
      const double idle = (now - progress_ns) / 1e9;
      if (idle < timeout) return;
      std::vector<int> frozen, left, behind, quiet;
      int64_t lead = -1;
      for (auto& [r, st] : v.ranks) lead = std::max(lead, st.last_step);
      for (auto& [r, st] : v.ranks) {
        if (st.exited && st.exit_class == "ok") left.push_back(r);
        if (st.exited) continue;
        if ((now - st.last_beat_ns) / 1e9 > stale_s) frozen.push_back(r);
        if (st.last_step < lead) behind.push_back(r);
        if (!stalled.empty() && !stalled.count(r)) quiet.push_back(r);
      }
      std::vector<int> ranks = !frozen.empty()   ? frozen
                               : !left.empty()   ? left
                               : !behind.empty() ? behind
                               : !quiet.empty()  ? quiet
                                                 : alive;
      const bool serving = v.workload == "infer";
      Finding f;
      f.symptom = top_step < 0 ? "2.2" : serving ? "5.1" : "4.11";
      f.ranks = ranks;
      f.step = top_step;
      f.confidence = std::min(0.95, 0.5 + 0.05 * (idle - timeout));
      f.evidence = fmt::format(
          "no progress for {:.1f} s (timeout {:.1f} s{}) at step {} while ranks [{}] live; "
          "frozen [{}], finished [{}], behind [{}]",
          idle, timeout, top_step < 0 ? ", before the first step" : "", top_step,
          fmt::join(alive, ","), fmt::join(frozen, ","), fmt::join(left, ","),
          fmt::join(behind, ","));
      f.key = fmt::format("hang|{}|{}", incarnation, top_step);
      tool.report(f);
    };
    tool.run(on_event, on_tick);
  });
}
