// The model's structure under the real launcher: vocab-parallel wte and head (sharded or gathered
// logits) and tied embeddings over TP and pipeline stages reproduce the single-rank loss
// trajectory of the same model; skipping the embedding group's all-reduce of a tied weight's
// gradients (the `embedding.grads_all_reduce` site) does not. Tolerance as in
// train_layouts_test: 1e-5 relative per step (layouts only reorder fp32 sums).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

TrainRun train(int ranks, std::vector<std::string> args,
               std::map<std::string, std::string> env = {}) {
  return run_train(FAULTLINE_TRAIN, ranks, std::move(args), 12, std::move(env));
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// The largest relative difference of the per-step losses (infinity when a run failed).
double max_relative_difference(const TrainRun& a, const TrainRun& b) {
  if (a.proc.exit_code != 0 || b.proc.exit_code != 0 || a.steps.size() != b.steps.size()) {
    return INFINITY;
  }
  double worst = 0;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const double x = a.steps[i]["loss"], y = b.steps[i]["loss"];
    worst = std::max(worst, std::fabs(x - y) / std::fabs(y));
  }
  return worst;
}

void expect_same(const TrainRun& r, const TrainRun& ref, const char* what) {
  ASSERT_EQ(ref.proc.exit_code, 0) << ref.proc.output;
  ASSERT_EQ(r.proc.exit_code, 0) << what << "\n" << r.proc.output;
  EXPECT_LT(max_relative_difference(r, ref), 1e-5) << what;
}

const std::vector<std::string> kTied = {"--tie-embeddings", "true"};

TEST(StructureTrain, VocabParallelHeadMatchesTheReplicatedOne) {
  const TrainRun ref = train(1, {"--micro-batch", "8"});
  for (const char* out : {"true", "false"}) {
    expect_same(train(2, {"--tp", "2", "--micro-batch", "8", "--vocab-parallel", "true",
                          "--parallel-output", out}),
                ref, out);
  }
}

TEST(StructureTrain, PaddedVocabularyShardsMatchTheSamePaddingOnOneRank) {
  // 63 tokens: at TP 2 the vocab-parallel model pads to 64 (make_vocab_size_divisible_by 1 x 2).
  const TrainRun ref =
      train(1, {"--micro-batch", "8", "--vocab", "63", "--padded-vocab-size", "64"});
  expect_same(
      train(2, {"--tp", "2", "--micro-batch", "8", "--vocab", "63", "--vocab-parallel", "true"}),
      ref, "vocab 63 at tp 2");
}

TEST(StructureTrain, TiedEmbeddingsMatchOverTensorAndPipelineParallelism) {
  const TrainRun ref = train(1, with({"--micro-batch", "8"}, kTied));
  ASSERT_EQ(ref.proc.exit_code, 0) << ref.proc.output;
  // Tied is another model than untied: the trajectories differ.
  EXPECT_GT(max_relative_difference(ref, train(1, {"--micro-batch", "8"})), 1e-3);
  expect_same(
      train(2, with({"--tp", "2", "--micro-batch", "8", "--vocab-parallel", "true"}, kTied)), ref,
      "tied tp2 vocab-parallel");
  expect_same(train(2, with({"--pp", "2", "--micro-batch", "2", "--grad-accum", "4"}, kTied)), ref,
              "tied pp2");
  expect_same(train(2, with({"--dp", "2", "--zero", "3", "--micro-batch", "4"}, kTied)), ref,
              "tied zero3");
}

TEST(StructureTrain, SkippingTheEmbeddingGroupAllReduceLetsTheTiedCopiesDrift) {
  const auto args = with({"--pp", "2", "--micro-batch", "2", "--grad-accum", "4"}, kTied);
  const TrainRun ref = train(1, with({"--micro-batch", "8"}, kTied));
  const TrainRun skipped =
      train(2, args, {{"FAULTLINE_FAULTS", "embedding.grads_all_reduce=skip"}});
  ASSERT_EQ(skipped.proc.exit_code, 0) << skipped.proc.output;
  EXPECT_GT(max_relative_difference(skipped, ref), 1e-3);
}

}  // namespace
}  // namespace fl::test

namespace fl::test {
namespace {

// NVIDIA/Megatron-LM#1038: data with ids past the vocabulary. The vocab-parallel embedding (TP > 1)
// masks every id outside a rank's rows, so one past the whole table is zero on every rank and the
// vocab-parallel cross entropy gives its target a logit of 0: training runs. A plain lookup
// (TP 1) refuses the id, and so does the cross entropy over gathered logits (parallel_output
// false), as torch's does.
TEST(StructureTrain, IdsPastTheVocabularyTrainUnderVocabParallelAndStopAPlainLookup) {
  const std::vector<std::string> past = {"--micro-batch",    "8",   "--data-vocab", "100",
                                         "--vocab-parallel", "true"};
  const TrainRun masked = train(2, with({"--tp", "2"}, past));
  EXPECT_EQ(masked.proc.exit_code, 0) << masked.proc.output;
  EXPECT_EQ(masked.steps.size(), 12u);
  const TrainRun plain = train(2, with({"--dp", "2"}, past));
  EXPECT_NE(plain.proc.exit_code, 0);
  EXPECT_NE(plain.proc.output.find("is outside the vocabulary (size 64)"), std::string::npos)
      << plain.proc.output;
  const TrainRun gathered = train(2, with({"--tp", "2", "--parallel-output", "false"}, past));
  EXPECT_NE(gathered.proc.exit_code, 0);
  EXPECT_NE(gathered.proc.output.find("IndexError: Target "), std::string::npos)
      << gathered.proc.output;
  EXPECT_NE(gathered.proc.output.find("is out of bounds"), std::string::npos);
}

}  // namespace
}  // namespace fl::test
