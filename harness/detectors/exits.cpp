// fl-detect-exits: a rank ends by a signal or a crash while the job runs — an unexpected
// termination (4.8 in training, 5.1 in serving). What a process supervisor sees: the exit
// status. SIGKILL from outside the job is most often the kernel's OOM killer (or an operator);
// SIGSEGV, SIGBUS and SIGABRT are crashes. Exits the harness caused (teardown, restarts) and
// error exits (a rank that reported an error and left: the error is the symptom, not the exit)
// do not count.
#include <csignal>

#include <fmt/format.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-exits: a rank killed by a signal or crashing while the job runs"};
  return tool_main(app, argc, argv, "exits", [&](Tool& tool) {
    tool.run([&](const Event& e) {
      if (e.kind != "rank_exit" || e.rank < 0 || tool.view().ending) return;
      const std::string klass = e.data.value("class", "");
      if (e.data.value("by_harness", false) || (klass != "signal" && klass != "crash")) return;
      const int sig = e.data.value("code", 0);
      Finding f;
      f.symptom = tool.view().workload == "infer" ? "5.1" : "4.8";
      f.ranks = {e.rank};
      f.step = tool.view().ranks.count(e.rank) ? tool.view().ranks.at(e.rank).last_step : -1;
      f.confidence = sig == SIGKILL ? 0.8 : 0.6;
      f.evidence = fmt::format(
          "rank {} ended by signal {} after step {} while {} rank(s) ran on{}", e.rank, sig, f.step,
          tool.view().alive().size(),
          sig == SIGKILL ? " (SIGKILL from outside the job: the kernel's OOM killer or an operator)"
                         : "");
      f.key = fmt::format("exit-{}-{}", tool.view().incarnation, e.rank);
      tool.report(f);
    });
  });
}
