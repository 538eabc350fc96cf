// The trainer's numeric settings: the optimizer's state size, the learning-rate schedule (scaling
// rule and warm-up) and the checks that refuse bad values naming the option.
#include <algorithm>
#include <cmath>

#include "workloads/train/trainer.hpp"

namespace fl::train {

int optimizer_state_bytes(const TrainConfig& cfg) {
  if (cfg.optimizer == "sgd") return cfg.momentum > 0.0f ? 4 : 0;
  return 8;
}

void validate_numerics(const TrainConfig& cfg) {
  if (cfg.optimizer != "adamw" && cfg.optimizer != "sgd" && cfg.optimizer != "muon") {
    raise<ConfigError>("--optimizer '{}' is not supported (allowed: adamw, sgd, muon)",
                       cfg.optimizer);
  }
  if (cfg.momentum != 0.0f && cfg.optimizer == "adamw") {
    raise<ConfigError>(
        "--momentum {} applies to --optimizer sgd or muon only (this run uses {}, whose moments "
        "are set by its betas)",
        cfg.momentum, cfg.optimizer);
  }
  if (!(cfg.momentum >= 0.0f && cfg.momentum < 1.0f)) {
    raise<ConfigError>("--momentum {} is out of range (allowed: 0 <= momentum < 1)", cfg.momentum);
  }
  if (cfg.lr_scaling != "none" && cfg.lr_scaling != "linear" && cfg.lr_scaling != "sqrt") {
    raise<ConfigError>("--lr-scaling '{}' is not supported (allowed: none, linear, sqrt)",
                       cfg.lr_scaling);
  }
  if (cfg.warmup_style != "linear" && cfg.warmup_style != "constant" &&
      cfg.warmup_style != "none") {
    raise<ConfigError>("--warmup-style '{}' is not supported (allowed: linear, constant, none)",
                       cfg.warmup_style);
  }
  if (cfg.warmup_steps < 0) {
    raise<ConfigError>("--warmup-steps {} is negative (allowed: 0 or more)", cfg.warmup_steps);
  }
  const LossScalerConfig& s = cfg.loss_scale;
  if (s.hysteresis < 1) {
    raise<ConfigError>(
        "--hysteresis {} is not allowed (allowed: 1 or more overflows tolerated before the loss "
        "scale is lowered)",
        s.hysteresis);
  }
  if (s.growth_interval < 1) {
    raise<ConfigError>("--loss-scale-window {} is not allowed (allowed: 1 or more clean steps)",
                       s.growth_interval);
  }
  if (!(s.min_scale > 0.0f) || s.initial_scale < s.min_scale) {
    raise<ConfigError>(
        "--loss-scale {} and --min-loss-scale {} are not allowed (allowed: 0 < min-loss-scale "
        "<= loss-scale)",
        s.initial_scale, s.min_scale);
  }
}

float scheduled_lr(const TrainConfig& cfg, int dp, int64_t step) {
  const float k = cfg.lr_scaling == "linear" ? static_cast<float>(dp)
                  : cfg.lr_scaling == "sqrt" ? std::sqrt(static_cast<float>(dp))
                                             : 1.0f;
  const float peak = cfg.lr * k, floor = cfg.min_lr * k;
  const int warmup = cfg.warmup_style == "none" ? 0 : cfg.warmup_steps;
  if (step < warmup) {
    if (cfg.warmup_style == "constant") return cfg.lr;
    return peak * static_cast<float>(step + 1) / static_cast<float>(warmup);
  }
  const int64_t decay = cfg.decay_steps > 0 ? cfg.decay_steps : std::max<int64_t>(cfg.steps, 1);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) /
                        static_cast<double>(std::max<int64_t>(1, decay - warmup)));
  return floor +
         0.5f * (peak - floor) * static_cast<float>(1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace fl::train
