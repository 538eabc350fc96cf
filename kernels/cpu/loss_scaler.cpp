#include "kernels/loss_scaler.hpp"

#include <algorithm>

#include "injector/site.hpp"

namespace fl {

LossScaler::LossScaler(LossScalerConfig cfg)
    : cfg_(cfg), scale_(cfg.initial_scale), hysteresis_left_(std::max(1, cfg.hysteresis)) {
  if (cfg_.initial_scale < cfg_.min_scale || cfg_.min_scale <= 0 || cfg_.backoff_factor <= 0 ||
      cfg_.backoff_factor >= 1 || cfg_.growth_factor < 1 || cfg_.growth_interval < 1 ||
      cfg_.hysteresis < 1) {
    raise<ConfigError>(
        "invalid loss scaler: initial scale {} (must be >= min scale {} > 0), backoff {} (must "
        "be in (0, 1)), growth {} (must be >= 1), growth interval {} (must be >= 1), "
        "hysteresis {} (must be >= 1)",
        cfg_.initial_scale, cfg_.min_scale, cfg_.backoff_factor, cfg_.growth_factor,
        cfg_.growth_interval, cfg_.hysteresis);
  }
}

bool LossScaler::update(bool overflow, int64_t step) {
  auto v = FAULTLINE_FAULT_POINT(
      "loss_scale.update",
      (fault::SiteContext{step, "", "loss_scale.update", -1, &scale_, 1, DType::kF32, -1}));
  if (v == fault::Verdict::kFail) overflow = true;
  const int hysteresis = std::max(1, cfg_.hysteresis);
  if (!overflow) {
    ++good_;
    if (cfg_.consecutive_hysteresis) hysteresis_left_ = hysteresis;
    if (good_ % cfg_.growth_interval == 0) {
      scale_ *= cfg_.growth_factor;
      hysteresis_left_ = hysteresis;
    }
    return true;
  }
  ++skipped_;
  good_ = 0;
  if (hysteresis_left_ > 1) {
    --hysteresis_left_;  // tolerated: the step is skipped, the scale stays
    return false;
  }
  if (scale_ <= cfg_.min_scale) {
    if (cfg_.raise_error_at_min_scale) {
      raise<LossScaleError>(
          "{} (gradient overflow at step {} with the loss scale already at its minimum {}; {} "
          "steps skipped so far)",
          kLossScaleAtMinimum, step, cfg_.min_scale, skipped_);
    }
    return false;  // skip again; the scale cannot go lower
  }
  scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff_factor);
  return false;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  good_ = s.good;
  skipped_ = s.skipped;
  hysteresis_left_ = s.hysteresis_left;
}

}  // namespace fl
