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

// Complete steps (every rank reported), oldest first.
using Steps = std::vector<const std::map<int, Sample>*>;

// Rank `r`'s median compute time over the steps `w`.
double compute_of(const Steps& w, int r) {
  std::vector<double> c;
  for (auto* m : w) {
    if (auto it = m->find(r); it != m->end()) c.push_back(it->second.compute);
  }
  return median(c);
}

// The median over `r`'s peers of their median compute time over `w`.
double peers_of(const Steps& w, int r) {
  std::vector<double> c;
  for (auto& [q, s] : *w.front()) {
    if (q != r) c.push_back(compute_of(w, q));
  }
  return median(c);
}

// The job's time in collectives (or compute) per step over `w`: per step the least-waiting
// rank's, then the median over the steps.
double job_median(const Steps& w, bool in_comm) {
  std::vector<double> per_step;
  for (auto* m : w) {
    std::vector<double> x;
    for (auto& [r, s] : *m) x.push_back(in_comm ? s.comm : s.compute);
    per_step.push_back(fl::stats::lower_median(x));
  }
  return median(per_step);
}

struct StragglerOptions {
  double factor = 2.5;
  double min_extra_s = 0.05;
  int baseline_steps = 5, window = 4;
};

class StragglerDetector {
 public:
  StragglerDetector(Tool& tool, const StragglerOptions& o) : tool_(tool), o_(o) {}

  void on_event(const Event& e) {
    if (tool_.view().incarnation != incarnation_) {
      incarnation_ = tool_.view().incarnation;
      steps_.clear();
    }
    if (e.source != "rank" || e.kind != "step" || e.step < 1) return;
    const double interval = e.data.value("interval_s", e.data.value("step_time_s", 0.0));
    const double comm = e.data.value("comm_s", 0.0);
    steps_[e.step][e.rank] = {std::max(0.0, interval - comm), comm};
    const Steps done = complete_steps();
    if (static_cast<int>(done.size()) < o_.baseline_steps + o_.window) return;
    const Steps base(done.begin(), done.begin() + o_.baseline_steps);
    const Steps recent(done.end() - o_.window, done.end());
    judge(base, recent, e.step);
  }

 private:
  Steps complete_steps() const {
    const size_t world = std::max<size_t>(tool_.view().ranks.size(), 2);
    Steps done;
    for (auto& [st, per_rank] : steps_) {
      if (per_rank.size() >= world) done.push_back(&per_rank);
    }
    return done;
  }

  // A slow rank: every recent step it computed `factor` times its peers (relative to how it
  // compared in the baseline), and by at least min_extra_s. -1: none.
  int slowest_rank(const Steps& base, const Steps& recent) const {
    int slow = -1;
    double ratio = 0;
    for (auto& [r, s] : *recent.back()) {
      const double mine = compute_of(recent, r), peers = peers_of(recent, r);
      const double before = std::max(1.0, compute_of(base, r) / std::max(1e-5, peers_of(base, r)));
      const double x = mine / std::max(1e-5, peers) / before;
      if (x >= o_.factor && mine - peers >= o_.min_extra_s && x > ratio) {
        ratio = x;
        slow = r;
      }
    }
    return slow;
  }

  void judge(const Steps& base, const Steps& recent, int64_t step) {
    const int slow = slowest_rank(base, recent);
    // Slow collectives: the least-waiting rank's time in collectives grew `factor` times more
    // than the job's compute did.
    const double comm0 = std::max(1e-4, job_median(base, true)), comm1 = job_median(recent, true);
    const double growth =
        std::max(1.0, job_median(recent, false) / std::max(1e-4, job_median(base, false)));
    const bool slow_comm = comm1 / comm0 / growth >= o_.factor && comm1 - comm0 >= o_.min_extra_s;
    if (slow < 0 && !slow_comm) return;
    Finding f;
    f.symptom = tool_.view().workload == "infer" ? (slow >= 0 ? "5.4" : "5.10") : "4.1";
    if (slow >= 0) f.ranks = {slow};
    f.step = step;
    f.confidence = slow >= 0 ? 0.7 : 0.5;
    f.evidence = slow >= 0
                     ? fmt::format(
                           "rank {} computed {:.1f}x as long as its peers over the last {} steps "
                           "(median {:.3f} s vs {:.3f} s) while they waited in collectives",
                           slow, compute_of(recent, slow) / std::max(1e-5, peers_of(recent, slow)),
                           o_.window, compute_of(recent, slow), peers_of(recent, slow))
                     : fmt::format(
                           "time in collectives {:.3f} s per step over the last {} steps vs "
                           "{:.3f} s in the baseline, compute {:.1f}x",
                           comm1, o_.window, comm0, growth);
    f.key = fmt::format("slow|{}", incarnation_);
    tool_.report(f);
  }

  Tool& tool_;
  const StragglerOptions o_;
  std::map<int64_t, std::map<int, Sample>> steps_;
  int incarnation_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-straggler: a rank computing longer than its peers, or slow collectives"};
  StragglerOptions o;
  app.add_option("--factor", o.factor,
                 "A rank's compute over its peers' (or collectives' growth) that is a finding")
      ->capture_default_str();
  app.add_option("--min-extra-s", o.min_extra_s,
                 "...and at least this much longer per step, seconds")
      ->capture_default_str();
  app.add_option("--baseline-steps", o.baseline_steps,
                 "Steps after the first that set the baseline")
      ->capture_default_str();
  app.add_option("--window", o.window, "Recent complete steps whose median is judged")
      ->capture_default_str();
  return run_tool<StragglerDetector>(app, argc, argv, "straggler", o);
}
