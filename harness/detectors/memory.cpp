// fl-detect-memory: out-of-memory errors of the ranks, kills by the kernel's OOM killer (the
// memory cgroup's counter, or a SIGKILL nobody in the run sent), and a steady growth of a rank's
// allocated memory over the steps (a leak).
#include <map>
#include <vector>

#include <fmt/format.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-memory: OOM errors, OOM kills, memory growth"};
  int growth_steps = 10;
  double growth = 1.5;
  app.add_option("--growth-steps", growth_steps, "Steps of uninterrupted growth that make a leak")
      ->capture_default_str();
  app.add_option("--growth", growth, "...and memory must grow by this factor over them")
      ->capture_default_str();
  return tool_main(app, argc, argv, "memory", [&](Tool& tool) {
    std::map<int, std::vector<double>> mem;
    auto on_event = [&](const Event& e) {
      const RunView& v = tool.view();
      const bool serving = v.workload == "infer";
      if (e.source == "harness" && e.kind == "oom_kill") {
        tool.report({"4.8",
                     0,
                     {e.rank},
                     v.max_step(),
                     0.9,
                     fmt::format("kernel OOM killer: {} kill(s) in rank {}'s memory cgroup",
                                 e.data.value("kills", 0), e.rank),
                     ""});
        return;
      }
      if (e.source == "harness" && e.kind == "rank_exit" &&
          e.data.value("signal", "") == "SIGKILL" && !e.data.value("by_harness", false)) {
        tool.report(
            {"4.8",
             0,
             {e.rank},
             v.max_step(),
             0.6,
             fmt::format("rank {} was SIGKILLed by nobody in the run (the OOM killer?)", e.rank),
             ""});
        return;
      }
      if (e.source != "rank") return;
      if (e.kind == "error" && e.data.value("class", "") == "out of memory") {
        auto it = v.ranks.find(e.rank);
        const bool started = it != v.ranks.end() && it->second.last_step >= 0;
        tool.report({serving   ? "5.2"
                     : started ? "4.2"
                               : "3.4",
                     0,
                     {e.rank},
                     e.step,
                     0.9,
                     e.data.value("message", ""),
                     ""});
        return;
      }
      if (e.kind != "step" || !e.data.contains("mem_current")) return;
      auto& m = mem[e.rank];
      m.push_back(e.data.value("mem_current", 0.0));
      if (static_cast<int>(m.size()) <= growth_steps) return;
      const size_t n = m.size();
      bool rising = true;
      for (size_t i = n - growth_steps; i < n; ++i) rising = rising && m[i] > m[i - 1];
      const double first = m[n - 1 - growth_steps];
      if (rising && first > 0 && m.back() >= growth * first) {
        tool.report({serving ? "5.2" : "4.2",
                     0,
                     {e.rank},
                     e.step,
                     0.6,
                     fmt::format("rank {}: allocated memory grew every step for {} steps, "
                                 "{:.1f} -> {:.1f} MiB",
                                 e.rank, growth_steps, first / 1048576.0, m.back() / 1048576.0),
                     fmt::format("leak|{}", e.rank)});
      }
    };
    tool.run(on_event);
  });
}
