// fl-detect-straggler: a rank that computes longer than its peers in the same steps, or
// collectives that got slower while nobody computes longer. Workers report per step the interval
// since their previous step and the part of it spent inside collectives; the difference is the
// time a rank computed. Judging a rank against its peers in the same steps (and the job's
// collectives against its own compute) leaves out how busy the host is: a CPU hog stretches every
// rank alike, a straggler computes longer while its peers wait for it.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/stats.hpp"
#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

namespace {
struct Sample {
  double compute = 0, comm = 0;
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-straggler: a rank computing longer than its peers, or slow collectives"};
  double factor = 2.5;
  double min_extra_s = 0.05;
  int baseline_steps = 5, window = 4;
  app.add_option("--factor", factor,
                 "A rank's compute over its peers' (or collectives' growth) that is a finding")
      ->capture_default_str();
  app.add_option("--min-extra-s", min_extra_s, "...and at least this much longer per step, seconds")
      ->capture_default_str();
  app.add_option("--baseline-steps", baseline_steps, "Steps after the first that set the baseline")
      ->capture_default_str();
  app.add_option("--window", window, "Recent complete steps whose median is judged")
      ->capture_default_str();
  return tool_main(app, argc, argv, "straggler", [&](Tool& tool) {
    std::map<int64_t, std::map<int, Sample>> steps;
    int incarnation = 0;
    auto on_event = [&](const Event& e) {
      if (tool.view().incarnation != incarnation) {
        incarnation = tool.view().incarnation;
        steps.clear();
      }
      if (e.source != "rank" || e.kind != "step" || e.step < 1) return;
      const double interval = e.data.value("interval_s", e.data.value("step_time_s", 0.0));
      const double comm = e.data.value("comm_s", 0.0);
      steps[e.step][e.rank] = {std::max(0.0, interval - comm), comm};
      const RunView& v = tool.view();
      const size_t world = std::max<size_t>(v.ranks.size(), 2);
      // Complete steps only (every rank reported), oldest first.
      std::vector<const std::map<int, Sample>*> done;
      for (auto& [st, per_rank] : steps) {
        if (per_rank.size() >= world) done.push_back(&per_rank);
      }
      if (static_cast<int>(done.size()) < baseline_steps + window) return;
      const auto base = std::vector(done.begin(), done.begin() + baseline_steps);
      const auto recent = std::vector(done.end() - window, done.end());
      auto compute_of = [](const std::vector<const std::map<int, Sample>*>& w, int r) {
        std::vector<double> c;
        for (auto* m : w) {
          if (auto it = m->find(r); it != m->end()) c.push_back(it->second.compute);
        }
        return median(c);
      };
      auto peers_of = [&](const std::vector<const std::map<int, Sample>*>& w, int r) {
        std::vector<double> c;
        for (auto& [q, s] : *w.front()) {
          if (q != r) c.push_back(compute_of(w, q));
        }
        return median(c);
      };
      // A slow rank: every recent step it computed `factor` times its peers (relative to how it
      // compared in the baseline), and by at least min_extra_s.
      int slow = -1;
      double ratio = 0;
      for (auto& [r, s] : *recent.back()) {
        const double mine = compute_of(recent, r), peers = peers_of(recent, r);
        const double before =
            std::max(1.0, compute_of(base, r) / std::max(1e-5, peers_of(base, r)));
        const double x = mine / std::max(1e-5, peers) / before;
        if (x >= factor && mine - peers >= min_extra_s && x > ratio) {
          ratio = x;
          slow = r;
        }
      }
      // Slow collectives: the least-waiting rank's time in collectives grew `factor` times more
      // than the job's compute did.
      auto job = [](const std::vector<const std::map<int, Sample>*>& w, bool in_comm) {
        std::vector<double> per_step;
        for (auto* m : w) {
          std::vector<double> x;
          for (auto& [r, s] : *m) x.push_back(in_comm ? s.comm : s.compute);
          per_step.push_back(fl::stats::lower_median(x));
        }
        return median(per_step);
      };
      const double comm0 = std::max(1e-4, job(base, true)), comm1 = job(recent, true);
      const double growth = std::max(1.0, job(recent, false) / std::max(1e-4, job(base, false)));
      const bool slow_comm = comm1 / comm0 / growth >= factor && comm1 - comm0 >= min_extra_s;
      if (slow < 0 && !slow_comm) return;
      Finding f;
      f.symptom = v.workload == "infer" ? (slow >= 0 ? "5.4" : "5.10") : "4.1";
      if (slow >= 0) f.ranks = {slow};
      f.step = e.step;
      f.confidence = slow >= 0 ? 0.7 : 0.5;
      f.evidence =
          slow >= 0 ? fmt::format(
                          "rank {} computed {:.1f}x as long as its peers over the last {} steps "
                          "(median {:.3f} s vs {:.3f} s) while they waited in collectives",
                          slow, compute_of(recent, slow) / std::max(1e-5, peers_of(recent, slow)),
                          window, compute_of(recent, slow), peers_of(recent, slow))
                    : fmt::format(
                          "time in collectives {:.3f} s per step over the last {} steps vs "
                          "{:.3f} s in the baseline, compute {:.1f}x",
                          comm1, window, comm0, growth);
      f.key = fmt::format("slow|{}", incarnation);
      tool.report(f);
    };
    tool.run(on_event);
  });
}
