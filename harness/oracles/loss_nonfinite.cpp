// loss_nonfinite: a rank's loss became NaN or Inf, or the loss scaler gave up.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class LossNonfinite : public Oracle {
 public:
  std::string name() const override { return "loss_nonfinite"; }
  Finding check(const Expect& x, const RunSummary& f) const override {
    Finding out;
    out.hit = first(
        x, f.steps, [&](const RunSummary::Step& s) { return !s.loss.has_value(); },
        [&](const RunSummary::Step& s) {
          return fmt::format("loss is not finite at step {}", s.step);
        });
    if (!out.hit) out.hit = error_of(x, f, "loss scale", "a loss-scale failure").hit;
    out.absent = "every loss was finite and no loss-scale failure was reported";
    return out;
  }
};

}  // namespace

const Oracle& loss_nonfinite_oracle() {
  static const LossNonfinite o;
  return o;
}

}  // namespace fl::harness::oracles
