// The memory accountant and tensors; the dynamic loss scaler.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/device_arena.hpp"
#include "kernels/loss_scaler.hpp"
#include "kernels/tensor.hpp"
#include "tests/support/scratch.hpp"

namespace fl {
namespace {

TEST(MemoryAccountant, TracksCurrentAndPeakThroughTensors) {
  MemoryAccountant acct(0, 0);
  {
    auto a = Tensor::zeros({256, 4}, DType::kF32, "a", acct);
    auto b = Tensor::zeros({100}, DType::kF16, "b", acct);
    EXPECT_EQ(acct.current(), 256u * 4 * 4 + 200);
    EXPECT_EQ(a.numel(), 1024u);
    EXPECT_EQ(a.f32()[1023], 0.0f);
    EXPECT_THROW(b.f32(), Error);
    a.release();
    EXPECT_EQ(acct.current(), 200u);
  }
  EXPECT_EQ(acct.current(), 0u);
  EXPECT_EQ(acct.peak(), 4096u + 200);
}

TEST(MemoryAccountant, CategoriesFromTheNameKeepTheirOwnPeaks) {
  EXPECT_EQ(memory_category("params.weights"), MemCategory::kParams);
  EXPECT_EQ(memory_category("optimizer.master"), MemCategory::kOptimizer);
  EXPECT_EQ(memory_category("grads.partition"), MemCategory::kGrads);
  EXPECT_EQ(memory_category("act.h0.qkv"), MemCategory::kActivations);
  EXPECT_EQ(memory_category("grad.act.residual"), MemCategory::kActivations);
  EXPECT_EQ(memory_category("gather.params"), MemCategory::kGathers);
  EXPECT_EQ(memory_category("buffer.grad_bucket"), MemCategory::kBuffers);
  EXPECT_EQ(memory_category("paramsX"), MemCategory::kBuffers);
  MemoryAccountant acct(0, 0);
  {
    auto p = Tensor::zeros({100}, DType::kF32, "params.weights", acct);
    auto g = Tensor::zeros({50}, DType::kF32, "grads.full", acct);
    { auto a = Tensor::zeros({1000}, DType::kF32, "act.h0.ln1", acct); }
    EXPECT_EQ(acct.current(MemCategory::kActivations), 0u);
    auto o = Tensor::zeros({25}, DType::kF32, "optimizer.exp_avg", acct);
    g.release();
    EXPECT_EQ(acct.current(MemCategory::kGrads), 0u);
    EXPECT_EQ(acct.current(MemCategory::kParams), 400u);
  }
  EXPECT_EQ(acct.peak(MemCategory::kActivations), 4000u);
  EXPECT_EQ(acct.peak(MemCategory::kGrads), 200u);
  EXPECT_EQ(acct.peak(MemCategory::kOptimizer), 100u);
  // params + grads + optimizer held at once: the optimizer came while the gradients were alive.
  EXPECT_EQ(acct.model_state_peak(), 700u);
  EXPECT_EQ(acct.run_peak(), 4600u);
  acct.reset_peak();
  EXPECT_EQ(acct.peak(), 0u);
  EXPECT_EQ(acct.run_peak(), 4600u);  // the run's peak survives reset_peak
  EXPECT_EQ(acct.current(), 0u);
}

TEST(MemoryAccountant, BudgetExceededGivesAnOutOfMemoryErrorLikeCuda) {
  MemoryAccountant acct(10 * 1024 * 1024, 3);
  auto a = Tensor::zeros({2 * 1024 * 1024}, DType::kF32, "activations", acct);  // 8 MiB
  try {
    auto b = Tensor::zeros({1024 * 1024}, DType::kF32, "attn.qkv.grad", acct);  // 4 MiB more
    FAIL() << "allocation beyond the budget succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 3] out of memory on cpu: tried to allocate 4.00 MiB for 'attn.qkv.grad'; "
                 "8.00 MiB already allocated, budget 10.00 MiB (2.00 MiB free), peak 8.00 MiB");
    EXPECT_EQ(e.requested(), 4u * 1024 * 1024);
    EXPECT_EQ(e.allocated(), 8u * 1024 * 1024);
  }
  EXPECT_EQ(acct.current(), 8u * 1024 * 1024);  // the failed allocation reserved nothing
}

TEST(LossScaler, OverflowSkipsAndLowersCleanStepsGrow) {
  LossScaler s({.initial_scale = 1024,
                .growth_factor = 2,
                .backoff_factor = 0.5,
                .growth_interval = 3,
                .min_scale = 1,
                .hysteresis = 1});
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.update(false, 1));
  EXPECT_TRUE(s.update(false, 2));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(false, 3));
  EXPECT_EQ(s.scale(), 1024);  // grown after 3 clean steps
}

TEST(LossScaler, HysteresisToleratesOverflowsBeforeLowering) {
  LossScaler s({.initial_scale = 8,
                .growth_factor = 2,
                .backoff_factor = 0.5,
                .growth_interval = 100,
                .min_scale = 1,
                .hysteresis = 2});
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.scale(), 8);
  EXPECT_FALSE(s.update(true, 1));
  EXPECT_EQ(s.scale(), 4);
  // As in DeepSpeed, the budget is not restored by a clean step, only when the scale grows:
  // after a clean step the next overflow lowers the scale at once.
  EXPECT_TRUE(s.update(false, 2));
  EXPECT_FALSE(s.update(true, 3));
  EXPECT_EQ(s.scale(), 2);
}

// DeepSpeed's default (fp16.hysteresis 2): the first overflow only skips the step, the second
// halves the scale.
TEST(LossScaler, ByDefaultOneOverflowIsToleratedAndTheSecondHalvesTheScale) {
  LossScaler s;
  EXPECT_EQ(s.config().hysteresis, 2);
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_FALSE(s.update(true, 1));
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, ConsecutiveHysteresisIsRestoredByEveryCleanStep) {
  LossScaler s({.initial_scale = 8,
                .growth_interval = 100,
                .min_scale = 1,
                .hysteresis = 2,
                .consecutive_hysteresis = true});
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_TRUE(s.update(false, 1));
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_FALSE(s.update(true, 2));  // tolerated again
  EXPECT_EQ(s.scale(), 8);
  EXPECT_FALSE(s.update(true, 3));
  EXPECT_EQ(s.scale(), 4);
}

TEST(LossScaler, GrowthRestoresTheHysteresisAndCountsCleanStepsSinceTheLastOverflow) {
  LossScaler s({.initial_scale = 8, .growth_interval = 2, .min_scale = 1, .hysteresis = 2});
  EXPECT_FALSE(s.update(true, 0));  // tolerated
  EXPECT_FALSE(s.update(true, 1));  // 4
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_TRUE(s.update(false, 2));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_TRUE(s.update(false, 3));  // two clean steps since the overflow: x2
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_FALSE(s.update(true, 4));  // tolerated again
  EXPECT_EQ(s.scale(), 8);
  EXPECT_TRUE(s.update(false, 5));  // the overflow reset the window: no growth yet
  EXPECT_EQ(s.scale(), 8);
}

TEST(LossScaler, OverflowAtTheMinimumStopsTraining) {
  LossScaler s({.initial_scale = 4,
                .growth_factor = 2,
                .backoff_factor = 0.5,
                .growth_interval = 100,
                .min_scale = 1,
                .hysteresis = 1});
  EXPECT_FALSE(s.update(true, 10));  // 2
  EXPECT_FALSE(s.update(true, 11));  // 1
  try {
    s.update(true, 12);
    FAIL();
  } catch (const LossScaleError& e) {
    EXPECT_STREQ(e.what(),
                 "Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
                 "run. (gradient overflow at step 12 with the loss scale already at its minimum "
                 "1; 3 steps skipped so far)");
  }
}

TEST(LossScaler, HysteresisAppliesAtTheMinimumToo) {
  LossScaler s({.initial_scale = 1, .growth_interval = 100, .min_scale = 1, .hysteresis = 2});
  EXPECT_FALSE(s.update(true, 0));  // tolerated: no error yet
  EXPECT_THROW(s.update(true, 1), LossScaleError);
}

TEST(LossScaler, WithoutRaiseErrorAtMinScaleEveryOverflowIsSkippedAtTheMinimum) {
  LossScaler s({.initial_scale = 4,
                .growth_interval = 100,
                .min_scale = 1,
                .hysteresis = 1,
                .raise_error_at_min_scale = false});
  EXPECT_FALSE(s.update(true, 0));  // 2
  EXPECT_FALSE(s.update(true, 1));  // 1
  for (int64_t step = 2; step < 12; ++step) {
    EXPECT_FALSE(s.update(true, step));
    EXPECT_EQ(s.scale(), 1);
  }
  EXPECT_EQ(s.skipped_steps(), 12);
  EXPECT_TRUE(s.update(false, 12));  // a clean step still trains
  EXPECT_EQ(s.scale(), 1);
}

TEST(LossScaler, InvalidConfigurationIsRejected) {
  EXPECT_THROW(LossScaler({.initial_scale = 0.5f, .min_scale = 1}), Error);
  EXPECT_THROW(LossScaler({.backoff_factor = 1.5f}), Error);
  EXPECT_THROW(LossScaler({.hysteresis = 0}), ConfigError);
}

// The device arena hands out 64-byte aligned blocks of its file first fit, merges freed
// neighbours back and says no (null) when no free range is large enough.
TEST(DeviceArena, AllocatesFirstFitMergesFreedBlocksAndRefusesWhatDoesNotFit) {
  const std::string path =
      fl::test::removed_at_exit(std::filesystem::temp_directory_path() /
                                ("fl_arena_test_" + std::to_string(::getpid())))
          .string();
  std::ofstream(path).close();
  std::filesystem::resize_file(path, 64 * 100);
  {
    DeviceArena arena(path);
    EXPECT_EQ(arena.size(), 6400u);
    void* a = arena.allocate(100);  // 128 bytes
    void* b = arena.allocate(64);
    void* c = arena.allocate(1);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
    EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 128);
    EXPECT_EQ(arena.in_use(), 256u);
    EXPECT_EQ(arena.allocate(6400), nullptr);  // only 6144 bytes are left
    arena.free(b);
    EXPECT_EQ(arena.allocate(64), b);  // first fit: the hole b left
    arena.free(a);
    arena.free(b);
    arena.free(c);
    EXPECT_EQ(arena.in_use(), 0u);
    void* all = arena.allocate(6400);  // the freed blocks merged back into one range
    EXPECT_EQ(all, a);
    static_cast<char*>(all)[6399] = 'x';  // the file's pages: the data is in the file
    EXPECT_TRUE(arena.owns(static_cast<char*>(all) + 6399));
    EXPECT_THROW(arena.free(static_cast<char*>(all) + 64), Error);
  }
  std::ifstream in(path, std::ios::binary);
  in.seekg(6399);
  EXPECT_EQ(in.get(), 'x');
  std::filesystem::remove(path);
  EXPECT_THROW(DeviceArena{path}, ConfigError);  // names FAULTLINE_DEVICE_ARENA
}

}  // namespace
}  // namespace fl
