// baseline: the run against a fault-free reference run of the same scenario (or of another
// topology), run beside it in the same invocation (harness/run/run_side.cpp): time per step,
// time in collectives, final loss or memory, as a ratio to the reference's; or an inference
// run's tokens (baseline_tokens.cpp). The reference runs
// in the same window, on the same host, so load on the host slows both alike.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "base/stats.hpp"
#include "harness/oracles/oracle.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::oracles {
namespace {

struct BaselineParams : OracleParams {
  // What is compared with the reference run (throughput, collectives, transfer, loss, memory,
  // tokens).
  std::string measure = "throughput";
  double factor = 2;
  int64_t after_step = -1;
};

struct Measured {
  double value = 0;
  size_t steps = 0;
  int64_t first = -1;    // first step measured
  int64_t t_first = -1;  // when it was reported
  std::string unit;
  size_t per_op_steps = 0;  // transfer: steps measured collective by collective
};

// The collectives' own time in one step (measure: transfer): each collective's least time over
// the ranks, summed. The rank that reached a collective last waited for no peer, so its time is
// the transfer alone, while the others' includes waiting for it — for a peer's compute, or for a
// peer a busy host did not schedule, which grows with the load (stop 50: a 2-rank reference's time
// in collectives per token went from 1 ms idle to 216 ms under 12 busy loops on 2 cores). Ranks
// run the same collectives in the same order; when their lists differ in length or one has none
// (an older history, more collectives in the step than a worker keeps), the lower median over the
// ranks of their time in collectives, as `collectives` measures it (nullopt here).
std::optional<double> own_comm_time(const std::vector<const RunSummary::Step*>& v) {
  const size_t n = v.front()->comm_ops.size();
  for (const auto* s : v) {
    if (n == 0 || s->comm_ops.size() != n) return std::nullopt;
  }
  double sum = 0;
  for (size_t k = 0; k < n; ++k) {
    double least = v.front()->comm_ops[k];
    for (const auto* s : v) least = std::min(least, s->comm_ops[k]);
    sum += least;
  }
  return sum;
}

// One number per run. Time per step and time in collectives: per step the lower median over the
// ranks (the rank that waited least paid the step's own cost), then over the steps from
// `after_step` on (the first step, warm-up, left out) the median for time per step and the
// least for time in collectives. A collective's time has a floor set by the link (bytes over
// bandwidth, plus latency); a busy host only adds to it (a peer descheduled, a late wake-up),
// and adds in bursts that need not fall on the run's and the reference's steps alike, so the
// quietest step is the floor's estimate. A slow link lifts every step's floor. Final loss: the mean
// over the ranks of the last step's loss (infinite when one is not finite). Memory: the highest
// memory in use (mem_peak, else mem_current) of any rank. Time measures leave out the steps a
// rank reported before `t_landed` (the run's last out-of-process fault took effect then; -1:
// none): a step-triggered fault that a loaded harness applied late would otherwise have its
// unaffected steps judged as the fault's (stop 83: a CI smoke run's 512 kbit/s link landed 750 ms
// after its token 5, after the run's last token).
std::optional<Measured> measure(const Expect& x, const std::vector<RunSummary::Step>& steps,
                                int64_t t_landed = -1) {
  const auto& p = params<BaselineParams>(x);
  std::map<int64_t, std::vector<const RunSummary::Step*>> by_step;
  for (const auto& s : steps) by_step[s.step].push_back(&s);
  if (by_step.empty()) return std::nullopt;
  Measured m;
  if (p.measure == "loss") {
    const auto& last = by_step.rbegin()->second;
    double sum = 0;
    for (const auto* s : last) sum += s->loss ? *s->loss : std::numeric_limits<double>::infinity();
    m.value = sum / static_cast<double>(last.size());
    m.steps = 1;
    m.first = by_step.rbegin()->first;
    m.t_first = last.front()->t;
    m.unit = "loss";
    return m;
  }
  if (p.measure == "memory") {
    int64_t peak = -1;
    for (const auto& s : steps) peak = std::max({peak, s.mem_current, s.mem_peak});
    if (peak < 0) return std::nullopt;
    m.value = static_cast<double>(peak);
    m.steps = by_step.size();
    m.first = by_step.begin()->first;
    m.t_first = by_step.begin()->second.front()->t;
    m.unit = "bytes";
    return m;
  }
  const int64_t start = p.after_step >= 0 ? p.after_step : by_step.begin()->first + 1;
  std::vector<double> per_step;
  for (auto& [st, v] : by_step) {
    if (st < start ||
        std::any_of(v.begin(), v.end(), [&](const auto* s) { return s->t < t_landed; }))
      continue;
    const auto own = p.measure == "transfer" ? own_comm_time(v) : std::nullopt;
    if (own) {
      per_step.push_back(*own);
      ++m.per_op_steps;
    } else {
      std::vector<double> t;
      for (const auto* s : v) t.push_back(p.measure == "throughput" ? s->interval : s->comm);
      per_step.push_back(stats::lower_median(t));
    }
    if (m.first < 0) {
      m.first = st;
      m.t_first = v.front()->t;
      for (const auto* s : v) m.t_first = std::min(m.t_first, s->t);
    }
  }
  if (per_step.size() < 2) return std::nullopt;
  m.value = p.measure != "throughput" ? *std::min_element(per_step.begin(), per_step.end())
                                      : stats::upper_median(per_step);
  m.steps = per_step.size();
  m.unit = "s";
  return m;
}

std::string show(const Measured& m) {
  if (m.unit == "s") return fmt::format("{:.1f} ms", m.value * 1e3);
  if (m.unit == "bytes") return fmt::format("{:.1f} MiB", m.value / 1048576.0);
  return fmt::format("{:.4g}", m.value);
}

Finding unknown(std::string why) {
  Verdict v;
  v.outcome = "unknown";
  v.explanation = std::move(why);
  return {std::nullopt, "", v};
}

class Baseline : public Oracle {
 public:
  std::string name() const override { return "baseline"; }
  std::vector<KeySpec> keys() const override {
    return {{"expect.measure",
             KeyType::kEnum,
             "throughput",
             "baseline: what is compared with the reference run: throughput (time per step), "
             "collectives (time in collectives per step), transfer (each collective's least time "
             "over the ranks, summed per step: waits for a peer left out), loss (final loss) or "
             "memory (peak memory in use): the symptom shows when the run's is `factor` x the "
             "reference's; tokens (an inference run's generated tokens, call by call): when one "
             "differs",
             {"throughput", "collectives", "transfer", "loss", "memory", "tokens"}},
            factor_key(),
            after_step_key()};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<BaselineParams>();
    p->measure = c.e["measure"].as<std::string>();
    p->factor = c.e["factor"].as<double>();
    p->after_step = c.e["after_step"].as<int64_t>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const auto& p = params<BaselineParams>(x);
    const auto& ref = f.reference;
    if (!ref.present) {
      return unknown("no reference run in the history (the baseline oracle needs one)");
    }
    if (ref.outcome != "pass") {
      return unknown(fmt::format("the reference run did not complete ({}: {}; see {})",
                                 ref.outcome.empty() ? "no verdict" : ref.outcome, ref.explanation,
                                 ref.run_dir));
    }
    if (p.measure == "tokens") return compare_tokens(x, f);
    const char* what = p.measure == "throughput"    ? "time per step"
                       : p.measure == "collectives" ? "time in collectives per step"
                       : p.measure == "transfer"    ? "collectives' own time per step"
                       : p.measure == "loss"        ? "final loss"
                                                    : "peak memory in use";
    const auto run = measure(x, f.steps, f.t_fault_landed);
    const auto base = measure(x, ref.steps);
    if (!run || !base) {
      const bool late = !run && f.t_fault_landed >= 0 && measure(x, f.steps);
      return unknown(fmt::format("too few steps to compare {} (run: {}, reference: {}){}", what,
                                 run ? run->steps : 0, base ? base->steps : 0,
                                 late ? "; the run's fault took effect after its steps from "
                                        "after_step on were reported"
                                      : ""));
    }
    double ratio = 0;
    if (p.measure == "loss") {
      ratio = !std::isfinite(run->value)    ? std::numeric_limits<double>::infinity()
              : !std::isfinite(base->value) ? 0.0
                                            : run->value / std::max(1e-12, std::abs(base->value));
    } else {
      const double floor = p.measure == "memory" ? 1.0 : kTimerFloor;
      ratio = std::max(floor, run->value) / std::max(floor, base->value);
    }
    const std::string from = p.measure == "loss"     ? fmt::format(" at step {}", run->first)
                             : p.measure == "memory" ? std::string()
                                                     : fmt::format(" from step {}", run->first);
    std::string text = fmt::format("{} {}{} vs {} in the reference run ({:.1f}x; threshold {}x)",
                                   what, show(*run), from, show(*base), ratio, p.factor);
    if (p.measure != "loss" && p.measure != "memory" && run->first > measure(x, f.steps)->first) {
      text += " (the steps before the run's fault took effect left out)";
    }
    if (p.measure == "transfer") {
      text += fmt::format("; collective by collective in {} of {} steps (reference {} of {})",
                          run->per_op_steps, run->steps, base->per_op_steps, base->steps);
    }
    Finding out;
    if (ratio >= p.factor) {
      std::vector<int> ranks;
      for (const auto& s : f.steps) {
        if (rank_ok(x, s.rank) && !std::count(ranks.begin(), ranks.end(), s.rank)) {
          ranks.push_back(s.rank);
        }
      }
      std::sort(ranks.begin(), ranks.end());
      out.hit = Hit{run->t_first, run->first, ranks, text};
    } else {
      out.absent = text;
    }
    return out;
  }
};

}  // namespace

const Oracle& baseline_oracle() {
  static const Baseline o;
  return o;
}

}  // namespace fl::harness::oracles
