// memory_growth: a rank's memory in use keeps growing from step to step (a leak: buffers kept
// alive across steps, a cache that is never trimmed). The allocator's bytes in use at the end of
// each step are compared with the same rank's at its first steps, so the verdict depends on
// what the rank holds, not on how fast the host is. The first step is left out (it allocates the
// optimizer state and the workspaces once).
#include <fmt/format.h>

#include "base/stats.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

struct MemoryGrowthParams : OracleParams {
  double factor = 2;
};

class MemoryGrowth : public Oracle {
 public:
  std::string name() const override { return "memory_growth"; }
  std::vector<KeySpec> keys() const override { return {factor_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<MemoryGrowthParams>();
    p->factor = c.e["factor"].as<double>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const auto& p = params<MemoryGrowthParams>(x);
    std::map<int, std::vector<const RunSummary::Step*>> by_rank;
    for (auto& s : f.steps) {
      if (s.mem_current >= 0 && rank_ok(x, s.rank)) by_rank[s.rank].push_back(&s);
    }
    Finding out;
    std::vector<int> grown;
    int64_t t_hit = -1, step_hit = -1;
    double largest = 0;
    int largest_rank = -1;
    std::string largest_text;
    for (auto& [rank, steps] : by_rank) {
      std::sort(steps.begin(), steps.end(), [](auto* a, auto* b) { return a->step < b->step; });
      if (steps.size() < 4) continue;
      // Reference: the lower median of the first steps after the first (a third of them).
      const size_t n_ref = std::max<size_t>(1, (steps.size() - 1) / 3);
      std::vector<double> ref;
      for (size_t i = 1; i <= n_ref; ++i) ref.push_back(static_cast<double>(steps[i]->mem_current));
      const double base = std::max(1.0, stats::lower_median(ref));
      const double end = static_cast<double>(steps.back()->mem_current);
      if (end / base > largest) {
        largest = end / base;
        largest_rank = rank;
        largest_text =
            fmt::format("rank {}: {:.1f} MiB at step {}, {:.1f} MiB at step {}", rank,
                        base / 1048576.0, steps[1]->step, end / 1048576.0, steps.back()->step);
      }
      if (end / base < p.factor) continue;
      grown.push_back(rank);
      // When it first crossed the threshold.
      for (size_t i = n_ref + 1; i < steps.size(); ++i) {
        if (static_cast<double>(steps[i]->mem_current) >= p.factor * base) {
          if (t_hit < 0 || steps[i]->t < t_hit) {
            t_hit = steps[i]->t;
            step_hit = steps[i]->step;
          }
          break;
        }
      }
    }
    if (by_rank.empty() || largest_rank < 0) {
      Verdict v;
      v.outcome = "unknown";
      v.explanation = by_rank.empty() ? "no rank reported its memory in use per step"
                                      : "fewer than 4 steps with memory reported: too few to "
                                        "compare";
      out.verdict = v;
      return out;
    }
    if (!grown.empty()) {
      out.hit = Hit{
          t_hit, step_hit, grown,
          fmt::format("memory in use grew {:.1f}x on {} ({}; threshold {}x)", largest,
                      grown.size() == 1 ? "one rank" : "several ranks", largest_text, p.factor)};
    }
    out.absent = fmt::format("no rank's memory in use grew {}x (largest: {:.2f}x, {})", p.factor,
                             largest, largest_text);
    return out;
  }
};

}  // namespace

const Oracle& memory_growth_oracle() {
  static const MemoryGrowth o;
  return o;
}

}  // namespace fl::harness::oracles
