// loss_divergence: a rank's loss rose above expect.factor times its best so far (or stopped
// being finite).
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

struct LossDivergenceParams : OracleParams {
  double factor = 2;
};

class LossDivergence : public Oracle {
 public:
  std::string name() const override { return "loss_divergence"; }
  std::vector<KeySpec> keys() const override { return {factor_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<LossDivergenceParams>();
    p->factor = c.e["factor"].as<double>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const double factor = params<LossDivergenceParams>(x).factor;
    Finding out;
    std::map<int, double> best;
    out.hit = first(
        x, f.steps,
        [&](const RunSummary::Step& s) {
          if (!s.loss) return true;
          auto it = best.find(s.rank);
          if (it == best.end()) {
            best[s.rank] = *s.loss;
            return false;
          }
          if (*s.loss > factor * it->second) return true;
          it->second = std::min(it->second, *s.loss);
          return false;
        },
        [&](const RunSummary::Step& s) {
          return s.loss ? fmt::format("loss {:.4f} at step {} is over {}x its best so far", *s.loss,
                                      s.step, factor)
                        : fmt::format("loss is not finite at step {}", s.step);
        });
    out.absent = fmt::format("the loss never rose above {}x its best", factor);
    return out;
  }
};

}  // namespace

const Oracle& loss_divergence_oracle() {
  static const LossDivergence o;
  return o;
}

}  // namespace fl::harness::oracles
