// skipped_steps: a rank's optimizer updates were skipped step after step (the fp16 loss scaler
// found an overflow each time), from the step events' `skipped` flag.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

struct SkippedStepsParams : OracleParams {
  int64_t skipped = 3;
};

// A healthy fp16 run skips a few steps while the loss scale comes down from its start value, so
// the oracle asks for `expect.skipped` skips in a row on one rank, not for any skip.
class SkippedSteps : public Oracle {
 public:
  std::string name() const override { return "skipped_steps"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"expect.skipped",
         KeyType::kInt,
         "3",
         "skipped_steps: updates skipped on this many steps in a row on one rank (a healthy fp16 "
         "run skips a few while its loss scale comes down)",
         {},
         1,
         1e9}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<SkippedStepsParams>();
    p->skipped = c.e["skipped"].as<int64_t>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const int64_t skipped = params<SkippedStepsParams>(x).skipped;
    std::map<int, std::vector<const RunSummary::Step*>> by_rank;
    for (const auto& s : f.steps) by_rank[s.rank].push_back(&s);
    Finding out;
    int64_t longest = 0, total = 0;
    std::optional<Hit> best;
    for (auto& [rank, steps] : by_rank) {
      if (!rank_ok(x, rank)) continue;
      std::stable_sort(steps.begin(), steps.end(),
                       [](auto* a, auto* b) { return a->step < b->step; });
      int64_t run = 0, first = -1;
      for (const auto* s : steps) {
        if (!s->skipped) {
          run = 0;
          continue;
        }
        ++total;
        if (run++ == 0) first = s->step;
        longest = std::max(longest, run);
        if (run == skipped && (!best || s->t < best->t)) {
          best = Hit{s->t,
                     first,
                     {rank},
                     fmt::format("rank {} skipped its update on {} steps in a row (steps {}-{}; "
                                 "threshold {})",
                                 rank, run, first, s->step, skipped)};
        }
      }
    }
    if (best) {
      // Every expected rank that reached the count is named.
      for (auto& [rank, steps] : by_rank) {
        if (rank == best->ranks.front() || !rank_ok(x, rank)) continue;
        int64_t run = 0;
        for (const auto* s : steps) {
          run = s->skipped ? run + 1 : 0;
          if (run >= skipped) {
            best->ranks.push_back(rank);
            break;
          }
        }
      }
      std::sort(best->ranks.begin(), best->ranks.end());
      out.hit = best;
      return out;
    }
    out.absent = fmt::format(
        "no rank skipped its update on {} steps in a row (longest run {}, {} skipped step(s) in "
        "all)",
        skipped, longest, total);
    return out;
  }
};

}  // namespace

const Oracle& skipped_steps_oracle() {
  static const SkippedSteps o;
  return o;
}

}  // namespace fl::harness::oracles
