// fl-detect-logs: a log classifier. Every line a rank prints, and every error a rank reports, is
// matched against known signatures (the first that matches wins), each mapped to a taxonomy
// symptom for training and for serving. It localises to the rank that printed the line. The
// table (logs_signatures.hpp) was written against real error texts from public issues and
// matches both log dialects (workload.fidelity); --lines-only ignores the reported error
// messages, which carry faultline's own sentence in both dialects. Paths and the run's own name
// are masked before matching (base/text_mask.hpp): they are labels, not evidence.
#include <cstdlib>

#include <fmt/format.h>

#include "harness/detectors/logs_signatures.hpp"
#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;
using fl::detect::logs::Signature;
using fl::detect::logs::signatures;

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-logs: rank output and errors matched against known signatures"};
  bool list = false;
  bool lines_only = false;
  app.add_flag("--list", list, "Print the signatures and exit");
  app.add_flag("--lines-only", lines_only,
               "Match only the lines ranks print, not the error messages they report (what a "
               "tool reading real logs has)");
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--list") {
      for (auto& s : signatures()) {
        std::printf("%-20s train %-5s serve %-5s source %-28s %s\n", s.name, s.train, s.serve,
                    s.source, s.pattern);
      }
      return 0;
    }
  }
  const char* run_dir = std::getenv("FAULTLINE_RUN_DIR");
  const std::string run = fl::run_name(run_dir ? run_dir : "");
  return tool_main(app, argc, argv, "logs", [&](Tool& tool) {
    auto classify = [&](int rank, const std::string& line, int64_t step) {
      const RunView& v = tool.view();
      if (const Signature* found = logs::classify(fl::mask_name(line, run))) {
        const Signature& s = *found;
        auto it = v.ranks.find(rank);
        const bool started = it != v.ranks.end() && it->second.last_step >= 0;
        const char* sym = v.workload == "infer"                     ? s.serve
                          : (!started && s.train_before_first_step) ? s.train_before_first_step
                                                                    : s.train;
        Finding f;
        f.symptom = sym;
        f.ranks = {rank};
        f.step = step;
        f.confidence = 0.8;
        f.evidence = fmt::format("rank {} [{}]: {}", rank, s.name, line.substr(0, 300));
        f.key = fmt::format("{}|{}", sym, rank);
        tool.report(f);
        return;
      }
    };
    auto on_event = [&](const Event& e) {
      if (e.rank < 0) return;
      if (e.source == "harness" && e.kind == "output") {
        classify(e.rank, e.data.value("line", ""), tool.view().max_step());
      } else if (e.source == "rank" && e.kind == "error" && !lines_only) {
        classify(e.rank, e.data.value("message", ""), e.step);
      }
    };
    tool.run(on_event);
  });
}
