// throughput_degradation: the job got slower after a point — a rank slower than its peers, or
// collectives slower on every rank — judged so that a busy host cancels out.
#include <fmt/format.h>

#include "base/stats.hpp"
#include "harness/oracles/oracle.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::oracles {
namespace {

// Throughput: two comparisons that a busy host cancels out of, because each sets a time against
// a reference measured in the same steps of the same run.
//  - a slow rank: a rank's compute time (interval minus time in collectives) against its peers'
//    in the same steps from `split` on, relative to the same ratio before `split`;
//  - slow collectives: the job's time in collectives from `split` on against before, divided by
//    how much its compute time grew over the same windows (a host that got busier at the split
//    stretches both).
struct ThroughputParams : OracleParams {
  double factor = 2;
  int64_t after_step = -1;
  // What must be slow: "rank" (a rank computing longer than its peers), "collectives" (time in
  // collectives against compute) or "any".
  std::string slowed = "any";
};

struct ThroughputEvidence {
  std::optional<Hit> hit;
  std::string absent;
  bool judgeable = true;
};

using StepsByNumber = std::map<int64_t, std::map<int, const RunSummary::Step*>>;

// Per rank and window: compute times. Per window and step: the job's time in collectives and
// its typical rank's compute, both as lower medians over the ranks: the rank that waited least
// in collectives paid their own cost, not a wait for a peer that computed (or was preempted)
// longer; with two ranks the lower compute is the one that is not slow. The first step carries
// warm-up (allocation, first touches): left out.
struct SplitTimes {
  std::map<int, std::vector<double>> before_c, after_c;
  std::vector<double> before_comm, after_comm, before_n, after_n;
};

SplitTimes split_times(const StepsByNumber& by_step, int64_t split) {
  SplitTimes t;
  const int64_t first_step = by_step.begin()->first;
  for (auto& [st, per_rank] : by_step) {
    if (st == first_step) continue;
    const bool after = st >= split;
    std::vector<double> cm, cp;
    for (auto& [r, s] : per_rank) {
      (after ? t.after_c : t.before_c)[r].push_back(s->compute());
      cm.push_back(s->comm);
      cp.push_back(s->compute());
    }
    (after ? t.after_comm : t.before_comm).push_back(stats::lower_median(cm));
    (after ? t.after_n : t.before_n).push_back(stats::lower_median(cp));
  }
  return t;
}

// Rank `r`'s compute against its peers' in one window (0 without both).
double peer_ratio(const std::map<int, std::vector<double>>& c, int r) {
  std::vector<double> peers;
  for (auto& [q, v] : c) {
    if (q != r && !v.empty()) peers.push_back(stats::upper_median(v));
  }
  if (peers.empty() || !c.count(r) || c.at(r).empty()) return 0.0;
  return stats::upper_median(c.at(r)) / std::max(kTimerFloor, stats::upper_median(peers));
}

// The rank whose compute against its peers' grew most after the split.
struct SlowRank {
  int rank = -1;
  double growth = 0, after = 0, before = 1;
};

SlowRank slowest_rank(const Expect& x, const std::set<int>& ranks, const SplitTimes& t) {
  SlowRank slow;
  for (int r : ranks) {
    if (!rank_ok(x, r)) continue;
    const double a = peer_ratio(t.after_c, r);
    // A rank that always computed more (a pipeline's last stage, say) is judged against that.
    const double b = std::max(1.0, t.before_c.count(r) ? peer_ratio(t.before_c, r) : 1.0);
    if (a / b > slow.growth) slow = {r, a / b, a, b};
  }
  return slow;
}

// Slow collectives (or a slow rank that every peer waits for): collectives' growth over
// compute's, with what it says.
std::pair<double, std::string> collectives_growth(const SplitTimes& t, int64_t split) {
  const double comm_ratio = std::max(kTimerFloor, stats::upper_median(t.after_comm)) /
                            std::max(kTimerFloor, stats::upper_median(t.before_comm));
  const double compute_ratio = std::max(kTimerFloor, stats::upper_median(t.after_n)) /
                               std::max(kTimerFloor, stats::upper_median(t.before_n));
  return {comm_ratio / std::max(1.0, compute_ratio),
          fmt::format("time in collectives {:.1f} ms per step from step {} vs {:.1f} ms before "
                      "({:.1f}x) while compute changed {:.1f}x",
                      stats::upper_median(t.after_comm) * 1e3, split,
                      stats::upper_median(t.before_comm) * 1e3, comm_ratio, compute_ratio)};
}

ThroughputEvidence throughput_evidence(const Expect& x, const RunSummary& f) {
  const auto& p = params<ThroughputParams>(x);
  ThroughputEvidence ev;
  StepsByNumber by_step;
  for (auto& s : f.steps) by_step[s.step][s.rank] = &s;
  std::set<int> ranks;
  for (auto& s : f.steps) ranks.insert(s.rank);
  if (by_step.size() < 4 || ranks.size() < 2) {
    ev.judgeable = false;
    ev.absent = fmt::format("{} steps on {} ranks recorded: too few to compare", by_step.size(),
                            ranks.size());
    return ev;
  }
  const int64_t split = p.after_step >= 0
                            ? p.after_step
                            : by_step.begin()->first + static_cast<int64_t>(by_step.size()) / 3;
  const SplitTimes t = split_times(by_step, split);
  if (t.before_n.empty() || t.after_n.empty()) {
    ev.judgeable = false;
    ev.absent = fmt::format("not enough steps on both sides of step {}", split);
    return ev;
  }
  int64_t t_at = -1;
  for (auto& s : f.steps) {
    if (s.step >= split && (t_at < 0 || s.t < t_at)) t_at = s.t;
  }
  const SlowRank slow = slowest_rank(x, ranks, t);
  const auto [job, job_text] = collectives_growth(t, split);
  const std::string rank_text =
      slow.rank >= 0 ? fmt::format(
                           "rank {} computed {:.1f}x as long as its peers from step {} ({:.1f}x "
                           "before)",
                           slow.rank, slow.after, split, slow.before)
                     : std::string("no rank to compare");
  const bool by_rank = p.slowed != "collectives", by_comm = p.slowed != "rank";
  if (by_rank && slow.rank >= 0 && slow.growth >= p.factor) {
    ev.hit = Hit{t_at,
                 split,
                 {slow.rank},
                 fmt::format("{}, its peers waiting in collectives; {} (threshold {}x)", rank_text,
                             job_text, p.factor)};
  } else if (by_comm && job >= p.factor) {
    std::vector<int> all;
    for (int r : ranks) {
      if (rank_ok(x, r)) all.push_back(r);
    }
    ev.hit = Hit{t_at, split, all,
                 fmt::format("collectives slowed on every rank: {}; {} (threshold {}x)", job_text,
                             rank_text, p.factor)};
  } else {
    ev.absent = fmt::format("{}; {} (threshold {}x{})", rank_text, job_text, p.factor,
                            p.slowed == "any"
                                ? ""
                                : fmt::format("; expect.slowed {}: only {} counts", p.slowed,
                                              p.slowed == "rank" ? "a rank slower than its peers"
                                                                 : "time in collectives"));
  }
  return ev;
}

class ThroughputDegradation : public Oracle {
 public:
  std::string name() const override { return "throughput_degradation"; }
  std::vector<KeySpec> keys() const override {
    return {
        factor_key(),
        after_step_key(),
        {"expect.slowed",
         KeyType::kEnum,
         "any",
         "throughput_degradation: what must be slow: rank (one rank computes longer than its "
         "peers in the same steps, which load on the host cancels out of), collectives (time in "
         "collectives after vs before, against compute: a slow link; a busy host alone slowed "
         "latency-bound collectives up to 8x, so give such a scenario a factor far above that) "
         "or any",
         {"rank", "collectives", "any"}}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<ThroughputParams>();
    p->factor = c.e["factor"].as<double>();
    p->after_step = c.e["after_step"].as<int64_t>();
    p->slowed = c.e["slowed"].as<std::string>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    auto ev = throughput_evidence(x, f);
    if (!ev.judgeable) {
      Verdict v;
      v.outcome = "unknown";
      v.explanation = ev.absent;
      return {std::nullopt, "", v};
    }
    return {ev.hit, ev.absent, std::nullopt};
  }
};

}  // namespace

const Oracle& throughput_degradation_oracle() {
  static const ThroughputDegradation o;
  return o;
}

}  // namespace fl::harness::oracles
