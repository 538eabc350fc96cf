#include "kernels/loss_scaler.hpp"

#include <algorithm>

#include "injector/site.hpp"

namespace fl {

LossScaler::LossScaler(LossScalerConfig cfg)
    : cfg_(cfg), scale_(cfg.initial_scale), hysteresis_left_(std::max(1, cfg.hysteresis)) {
  if (cfg_.initial_scale < cfg_.min_scale || cfg_.min_scale <= 0 || cfg_.backoff_factor <= 0 ||
      cfg_.backoff_factor >= 1 || cfg_.growth_factor < 1 || cfg_.growth_interval < 1) {
    raise(
        "invalid loss scaler: initial scale {} (must be >= min scale {} > 0), backoff {} (must "
        "be in (0, 1)), growth {} (must be >= 1), growth interval {} (must be >= 1)",
        cfg_.initial_scale, cfg_.min_scale, cfg_.backoff_factor, cfg_.growth_factor,
        cfg_.growth_interval);
  }
}

bool LossScaler::update(bool overflow, int64_t step) {
  auto v = FAULTLINE_FAULT_POINT(
      "loss_scale.update",
      (fault::SiteContext{step, "", "loss_scale.update", -1, &scale_, 1, DType::kF32, -1}));
  if (v == fault::Verdict::kFail) overflow = true;
  if (!overflow) {
    ++good_;
    hysteresis_left_ = std::max(1, cfg_.hysteresis);
    if (good_ % cfg_.growth_interval == 0) scale_ *= cfg_.growth_factor;
    return true;
  }
  ++skipped_;
  good_ = 0;
  if (scale_ <= cfg_.min_scale) {
    raise<LossScaleError>(
        "gradient overflow at step {} with the loss scale already at its minimum "
        "({}): it cannot be lowered further, so training stops ({} steps "
        "skipped so far)",
        step, cfg_.min_scale, skipped_);
  }
  if (--hysteresis_left_ <= 0) {
    scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff_factor);
    hysteresis_left_ = std::max(1, cfg_.hysteresis);
  }
  return false;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  good_ = s.good;
  skipped_ = s.skipped;
  hysteresis_left_ = s.hysteresis_left;
}

}  // namespace fl
