// The trainer's numeric knobs without running it: the learning-rate schedule under each scaling
// rule and warm-up style, the optimizer state a parameter costs, and the configuration errors
// that name the option and what is allowed.
#include <gtest/gtest.h>

#include <cmath>

#include "workloads/train/trainer.hpp"

namespace fl::train {
namespace {

TrainConfig schedule(const std::string& scaling, const std::string& warmup, int warmup_steps) {
  TrainConfig c;
  c.lr = 0.01f;
  c.min_lr = 0.001f;
  c.steps = 100;
  c.lr_scaling = scaling;
  c.warmup_style = warmup;
  c.warmup_steps = warmup_steps;
  return c;
}

TEST(LrSchedule, ScalingMultipliesTheWholeScheduleByDpOrItsSquareRoot) {
  for (int dp : {1, 4, 16}) {
    auto none = schedule("none", "none", 0), lin = schedule("linear", "none", 0),
         sq = schedule("sqrt", "none", 0);
    EXPECT_FLOAT_EQ(scheduled_lr(none, dp, 0), 0.01f);
    EXPECT_FLOAT_EQ(scheduled_lr(lin, dp, 0), 0.01f * dp);
    EXPECT_FLOAT_EQ(scheduled_lr(sq, dp, 0), 0.01f * std::sqrt(static_cast<float>(dp)));
    // The cosine ends at the scaled floor.
    EXPECT_FLOAT_EQ(scheduled_lr(lin, dp, 100), 0.001f * dp);
    EXPECT_FLOAT_EQ(scheduled_lr(none, dp, 100), 0.001f);
  }
}

TEST(LrSchedule, WarmupStyles) {
  auto lin = schedule("linear", "linear", 4);
  EXPECT_FLOAT_EQ(scheduled_lr(lin, 8, 0), 0.08f / 4);
  EXPECT_FLOAT_EQ(scheduled_lr(lin, 8, 3), 0.08f);
  EXPECT_FLOAT_EQ(scheduled_lr(lin, 8, 4), 0.08f);  // the peak once the warm-up is over
  auto constant = schedule("linear", "constant", 4);
  for (int s = 0; s < 4; ++s) EXPECT_FLOAT_EQ(scheduled_lr(constant, 8, s), 0.01f);
  EXPECT_FLOAT_EQ(scheduled_lr(constant, 8, 4), 0.08f);
  auto none = schedule("linear", "none", 4);  // the steps are ignored: the peak at once
  EXPECT_FLOAT_EQ(scheduled_lr(none, 8, 0), 0.08f);
  auto zero = schedule("none", "linear", 0);
  EXPECT_FLOAT_EQ(scheduled_lr(zero, 1, 0), 0.01f);
}

TEST(LrSchedule, DefaultScheduleIsTheUnscaledLinearWarmupAndCosine) {
  TrainConfig c;  // lr 1e-2, min_lr 1e-3, warm-up 5, 20 steps
  EXPECT_EQ(scheduled_lr(c, 4, 0), c.lr * 1.0f / 5.0f);
  EXPECT_EQ(scheduled_lr(c, 4, 5), c.lr);
  EXPECT_LT(scheduled_lr(c, 4, 19), c.lr);
  EXPECT_GT(scheduled_lr(c, 4, 19), c.min_lr);
}

TEST(Optimizer, StateBytesPerParameter) {
  TrainConfig c;
  EXPECT_EQ(optimizer_state_bytes(c), 8);
  c.optimizer = "sgd";
  EXPECT_EQ(optimizer_state_bytes(c), 0);
  c.momentum = 0.9f;
  EXPECT_EQ(optimizer_state_bytes(c), 4);
}

void expect_config_error(const TrainConfig& c, const std::string& text) {
  try {
    validate_numerics(c);
    FAIL() << "accepted: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(NumericsConfig, BadValuesNameTheOptionAndWhatIsAllowed) {
  TrainConfig ok;
  EXPECT_NO_THROW(validate_numerics(ok));
  TrainConfig c = ok;
  c.optimizer = "lamb";
  expect_config_error(c, "--optimizer 'lamb' is not supported (allowed: adamw, sgd, muon)");
  c = ok;
  c.momentum = 0.9f;
  expect_config_error(c, "--momentum 0.9 applies to --optimizer sgd or muon only");
  c.optimizer = "sgd";
  EXPECT_NO_THROW(validate_numerics(c));
  c.momentum = 1.0f;
  expect_config_error(c, "--momentum 1 is out of range (allowed: 0 <= momentum < 1)");
  c = ok;
  c.lr_scaling = "quadratic";
  expect_config_error(c, "--lr-scaling 'quadratic' is not supported (allowed: none, linear, sqrt)");
  c = ok;
  c.warmup_style = "exp";
  expect_config_error(c, "(allowed: linear, constant, none)");
  c = ok;
  c.warmup_steps = -1;
  expect_config_error(c, "--warmup-steps -1 is negative");
  c = ok;
  c.loss_scale.hysteresis = -2;
  expect_config_error(c, "--hysteresis -2 is not allowed (allowed: 1 or more");
  c = ok;
  c.loss_scale.growth_interval = 0;
  expect_config_error(c, "--loss-scale-window 0 is not allowed");
  c = ok;
  c.loss_scale.min_scale = 1e6f;
  expect_config_error(c, "(allowed: 0 < min-loss-scale <= loss-scale)");
}

}  // namespace
}  // namespace fl::train
