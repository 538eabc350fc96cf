// Dynamic loss scaling for fp16 training, as the mixed-precision optimizers of DeepSpeed and
// Megatron do it: gradients are computed on loss × scale; a step whose gradients overflow (inf or
// nan) is skipped and the scale is lowered; after `growth_interval` clean steps the scale grows.
// An overflow with the scale already at its minimum cannot be fixed by lowering it further, so
// training stops with LossScaleError — the loss-scale collapse symptom.
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
  int hysteresis = 1;  // overflows tolerated before the scale is lowered (DeepSpeed's knob)
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig cfg = {});

  float scale() const { return scale_; }
  // Records the outcome of a step. Returns true if the optimizer may apply the step, false if it
  // must be skipped. Throws LossScaleError when an overflow happens at the minimum scale.
  bool update(bool overflow, int64_t step);

  int64_t skipped_steps() const { return skipped_; }
  int64_t good_steps_in_a_row() const { return good_; }
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
