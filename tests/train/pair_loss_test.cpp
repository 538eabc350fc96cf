// workload.pair_loss (workloads/train/pair_step.cpp): two micro-batches' losses summed before one
// backward. Without activation checkpointing, or below ZeRO-2, the gradients are those of the two
// micro-batches trained apart; with checkpointing each block is differentiated in a pass of its
// own, so under ZeRO-2/3 a block's gradient hook fires once per forward and the second firing is
// DeepSpeed's "Gradient computed twice for this partition" (deepspeedai/DeepSpeed#988).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

TrainRun train(int stage, bool pair, bool checkpointing) {
  std::vector<std::string> a = {"--dp", "2", "--zero", std::to_string(stage), "--grad-accum", "2"};
  if (pair) a.emplace_back("--pair-loss");
  if (checkpointing) a.emplace_back("--activation-checkpointing");
  return run_train(FAULTLINE_TRAIN, 2, a, 3);
}

std::vector<double> losses(const TrainRun& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s.at("loss").get<double>());
  return out;
}

const char* const kTwice =
    "AssertionError: The parameter 2 has already been reduced. Gradient computed twice for this "
    "partition. Multiple gradient reduction is currently not supported";

TEST(PairLoss, CheckpointedBlocksUnderZero2And3FireTheirReduceHookTwice) {
  for (int stage : {2, 3}) {
    auto r = train(stage, true, true);
    EXPECT_NE(r.proc.exit_code, 0) << stage;
    // The tiny model's groups: the embedding (0), two blocks (1, 2), the head (3). The first
    // half's backward fires the blocks' hooks (each its own checkpointed pass) and holds the
    // embedding's and the head's; the second half's reaches the head (its first firing), then
    // the last block, whose hook fires a second time.
    EXPECT_NE(r.proc.output.find(kTwice), std::string::npos) << stage << r.proc.output;
    EXPECT_TRUE(r.steps.empty()) << stage;  // it fails in step 0's backward
    // The same micro-batches, each with its own backward, fire each hook once per pass.
    auto apart = train(stage, false, true);
    EXPECT_EQ(apart.proc.exit_code, 0) << stage << apart.proc.output;
    EXPECT_EQ(apart.steps.size(), 3u) << stage;
  }
}

// Under Colossal-AI's GeminiDDP the same second firing fails in Gemini's gradient hook instead
// (its chunk slice already filled), naming the block's first parameter; without checkpointing the
// pair is one pass and trains.
TEST(PairLoss, UnderGeminiTheSecondFiringFailsItsGradientHook) {
  const std::vector<std::string> a = {
      "--dp", "2", "--zero", "2", "--grad-accum", "2", "--pair-loss", "--zero-reducer", "gemini"};
  std::vector<std::string> ckpt = a;
  ckpt.emplace_back("--activation-checkpointing");
  auto r = run_train(FAULTLINE_TRAIN, 2, ckpt, 3);
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.output.find("RuntimeError: Parameter `h1.ln1.weight` failed at the gradient "
                               "reduction. Some unsupported torch function is operated upon this "
                               "parameter."),
            std::string::npos)
      << r.proc.output;
  EXPECT_TRUE(r.steps.empty());
  auto one_pass = run_train(FAULTLINE_TRAIN, 2, a, 3);
  EXPECT_EQ(one_pass.proc.exit_code, 0) << one_pass.proc.output;
  EXPECT_EQ(one_pass.steps.size(), 3u);
}

TEST(PairLoss, WithoutCheckpointingOrBelowZero2ThePairTrainsAsItsMicroBatches) {
  // ZeRO-1 reduces after the backward: the same sums in the same order as grad_accum alone.
  auto apart = train(1, false, true), pair = train(1, true, true);
  ASSERT_EQ(apart.proc.exit_code, 0) << apart.proc.output;
  ASSERT_EQ(pair.proc.exit_code, 0) << pair.proc.output;
  EXPECT_EQ(losses(pair), losses(apart));
  ASSERT_EQ(losses(pair).size(), 3u);
  // ZeRO-2 without checkpointing: one hook firing per group, after both halves; the pair's summed
  // gradients are reduced once instead of each half's, so the losses agree up to rounding.
  auto z2_apart = train(2, false, false), z2_pair = train(2, true, false);
  ASSERT_EQ(z2_apart.proc.exit_code, 0) << z2_apart.proc.output;
  ASSERT_EQ(z2_pair.proc.exit_code, 0) << z2_pair.proc.output;
  const auto a = losses(z2_apart), p = losses(z2_pair);
  ASSERT_EQ(a.size(), p.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(p[i], a[i], 1e-4 * std::abs(a[i])) << i;
}

TEST(PairLoss, AnOddGradAccumIsRefused) {
  auto r = run_train(FAULTLINE_TRAIN, 2, {"--dp", "2", "--grad-accum", "3", "--pair-loss"}, 2);
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.output.find("workload.pair_loss (--pair-loss) sums the losses of two "
                               "micro-batches before one backward: workload.grad_accum must be "
                               "even (this run: 3)"),
            std::string::npos)
      << r.proc.output;
}

}  // namespace
}  // namespace fl::test
