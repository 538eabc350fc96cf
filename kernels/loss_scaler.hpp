// Dynamic loss scaling for fp16 training, as DeepSpeed's DynamicLossScaler and apex's amp do it:
// gradients are computed on loss × scale; a step whose gradients overflow (inf or nan) is
// skipped, and once `hysteresis` overflows have been tolerated the scale is multiplied by
// `backoff_factor` (never below `min_scale`); after `growth_interval` clean steps in a row the
// scale grows by `growth_factor` (and the hysteresis budget is restored, or after every clean
// step with `consecutive_hysteresis`). An overflow with the scale already at its minimum cannot
// be fixed by lowering it: with `raise_error_at_min_scale` (DeepSpeed's default) training stops
// with LossScaleError carrying DeepSpeed's message; without it every such step is skipped and
// the scale stays at the minimum (the "attempted loss scale: 1, reducing to 1" loop).
#pragma once

#include <cstdint>

#include "base/error.hpp"

namespace fl {

class LossScaleError : public Error {
 public:
  using Error::Error;
};

struct LossScalerConfig {
  float initial_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 1000;
  float min_scale = 1.0f;
  // Overflows tolerated before the scale is lowered: DeepSpeed's `hysteresis` (its
  // DynamicLossScaler's delayed_shift), 2 by default there (FP16_HYSTERESIS_DEFAULT).
  int hysteresis = 2;
  bool consecutive_hysteresis = false;   // restore the hysteresis after every clean step
  bool raise_error_at_min_scale = true;  // false: keep skipping at the minimum scale
};

// DeepSpeed's text for an overflow at the minimum scale (deepspeed/runtime/fp16/loss_scaler.py).
inline constexpr const char* kLossScaleAtMinimum =
    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.";

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig cfg = {});

  float scale() const { return scale_; }
  // Records the outcome of a step. Returns true if the optimizer may apply the step, false if it
  // must be skipped. Throws LossScaleError when an overflow happens at the minimum scale (with
  // the hysteresis used up) and raise_error_at_min_scale is set.
  bool update(bool overflow, int64_t step);

  int64_t skipped_steps() const { return skipped_; }
  int64_t good_steps_in_a_row() const { return good_; }
  int hysteresis_left() const { return hysteresis_left_; }
  const LossScalerConfig& config() const { return cfg_; }
  // For checkpoints: the state that must survive a restart.
  struct State {
    float scale;
    int64_t good;
    int64_t skipped;
    int hysteresis_left;
  };
  State state() const { return {scale_, good_, skipped_, hysteresis_left_}; }
  void restore(const State& s);

 private:
  LossScalerConfig cfg_;
  float scale_;
  int64_t good_ = 0;
  int64_t skipped_ = 0;
  int hysteresis_left_;
};

}  // namespace fl
