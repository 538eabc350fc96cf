// Training under the real launcher: every parallel layout reproduces the single-rank loss
// trajectory; the same layout and seed reproduce themselves bit for bit; fp16 overflow skips
// steps and lowers the scale, and collapses into a clear error at the minimum; bf16 trains;
// impossible layouts are refused naming the sizes.
//
// Tolerance: 1e-5 relative on the loss of each of 20 steps. Layouts change only the order of
// floating-point sums (split GEMMs under TP, all-reduce order under DP, ZeRO's reduce-scatter),
// which perturbs fp32 results around 1e-7 relative per step; 1e-5 leaves room for that to grow
// over 20 Adam steps while still catching any real difference (a wrong shard, a missing
// all-reduce or a skipped micro-batch moves the loss by 1e-3 or more).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "kernels/device.hpp"
#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

TrainRun train(int ranks, std::vector<std::string> args, int steps = 20,
               std::map<std::string, std::string> env = {}) {
  return run_train(FAULTLINE_TRAIN, ranks, std::move(args), steps, std::move(env));
}

const TrainRun& reference() {
  static TrainRun ref = train(1, {"--micro-batch", "8"});
  return ref;
}

void expect_same_trajectory(const TrainRun& r, const char* layout) {
  const TrainRun& ref = reference();
  ASSERT_EQ(r.proc.exit_code, 0) << layout << "\n" << r.proc.output;
  ASSERT_EQ(r.steps.size(), ref.steps.size()) << layout;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const double want = ref.steps[i]["loss"], got = r.steps[i]["loss"];
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << layout << " step " << i;
  }
}

TEST(TrainLayouts, SingleRankLearnsTheCorpus) {
  const TrainRun& ref = reference();
  ASSERT_EQ(ref.proc.exit_code, 0) << ref.proc.output;
  ASSERT_EQ(ref.steps.size(), 20u);
  EXPECT_NEAR(ref.steps[0]["loss"].get<double>(), std::log(64.0), 0.05);  // starts at ln(V)
  EXPECT_LT(ref.steps[19]["loss"].get<double>(), ref.steps[0]["loss"].get<double>() - 1.0);
}

TEST(TrainLayouts, DataParallel) {
  expect_same_trajectory(train(2, {"--dp", "2", "--micro-batch", "4"}), "dp2");
}
TEST(TrainLayouts, GradientAccumulation) {
  expect_same_trajectory(train(1, {"--micro-batch", "4", "--grad-accum", "2"}), "accum2");
}
// A training loop whose no_sync guard does nothing (workload.grad_sync: micro_batch): every
// micro-batch's backward all-reduces the gradients. In fp32 the sum is the same up to rounding,
// so the trajectory is; the step makes grad_accum - 1 more rounds of the bucketed all-reduce,
// one collective each here (the default bucket is the whole tiny model, and dp 2 divides it
// without padding).
TEST(TrainLayouts, GradientsSyncedEveryMicroBatchTrainAlikeWithMoreAllReduces) {
  const std::vector<std::string> args = {"--dp", "2", "--micro-batch", "1", "--grad-accum", "4"};
  const TrainRun once = train(2, args);
  std::vector<std::string> every = args;
  every.insert(every.end(), {"--grad-sync", "micro_batch"});
  const TrainRun each = train(2, every);
  expect_same_trajectory(once, "dp2 accum4, synced once a step");
  expect_same_trajectory(each, "dp2 accum4, synced every micro-batch");
  ASSERT_EQ(once.steps.size(), each.steps.size());
  for (size_t i = 0; i < once.steps.size(); ++i) {
    ASSERT_TRUE(once.steps[i].contains("comm_ops")) << once.steps[i].dump();
    ASSERT_TRUE(each.steps[i].contains("comm_ops")) << each.steps[i].dump();
    EXPECT_EQ(each.steps[i]["comm_ops"].get<int>(), once.steps[i]["comm_ops"].get<int>() + 3)
        << "step " << i;
  }
}

TEST(TrainLayouts, TensorParallel) {
  expect_same_trajectory(train(2, {"--tp", "2", "--micro-batch", "8"}), "tp2");
}
TEST(TrainLayouts, Pipeline1F1B) {
  expect_same_trajectory(train(2, {"--pp", "2", "--micro-batch", "2", "--grad-accum", "4"}),
                         "pp2 1f1b");
}
TEST(TrainLayouts, PipelineGPipe) {
  expect_same_trajectory(
      train(2, {"--pp", "2", "--micro-batch", "2", "--grad-accum", "4", "--schedule", "gpipe"}),
      "pp2 gpipe");
}
TEST(TrainLayouts, ZeroStagesMatchPlainDataParallel) {
  for (const char* z : {"1", "2", "3"}) {
    expect_same_trajectory(train(2, {"--dp", "2", "--zero", z, "--micro-batch", "4"}),
                           (std::string("zero") + z).c_str());
  }
}
TEST(TrainLayouts, DataAndTensorParallel) {
  expect_same_trajectory(train(4, {"--dp", "2", "--tp", "2", "--micro-batch", "4"}), "dp2 tp2");
}
TEST(TrainLayouts, DataAndPipelineParallel) {
  expect_same_trajectory(
      train(4, {"--dp", "2", "--pp", "2", "--micro-batch", "2", "--grad-accum", "2"}), "dp2 pp2");
}
TEST(TrainLayouts, TensorAndPipelineParallel) {
  expect_same_trajectory(
      train(4, {"--tp", "2", "--pp", "2", "--micro-batch", "4", "--grad-accum", "2"}), "tp2 pp2");
}
TEST(TrainLayouts, DataTensorPipelineParallelOnEightRanks) {
  expect_same_trajectory(
      train(8, {"--dp", "2", "--tp", "2", "--pp", "2", "--micro-batch", "2", "--grad-accum", "2"}),
      "dp2 tp2 pp2");
}
TEST(TrainLayouts, Zero3WithTensorParallel) {
  expect_same_trajectory(train(4, {"--dp", "2", "--tp", "2", "--zero", "3", "--micro-batch", "4"}),
                         "dp2 tp2 zero3");
}

TEST(TrainDeterminism, SameLayoutAndSeedIsBitwiseIdentical) {
  std::vector<std::string> args = {"--dp", "2", "--tp", "2", "--micro-batch", "4", "--checksum"};
  auto a = train(4, args, 10), b = train(4, args, 10);
  ASSERT_EQ(a.proc.exit_code, 0) << a.proc.output;
  ASSERT_EQ(b.proc.exit_code, 0) << b.proc.output;
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i]["loss"].get<float>(), b.steps[i]["loss"].get<float>()) << i;
    EXPECT_EQ(a.steps[i]["grad_norm"].get<float>(), b.steps[i]["grad_norm"].get<float>()) << i;
  }
  std::regex re(R"(checksum rank (\d) \(dp \d+ tp \d+ pp \d+\): ([0-9a-f]{16}))");
  std::map<std::string, std::string> ca, cb;
  for (auto it = std::sregex_iterator(a.proc.output.begin(), a.proc.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    ca[(*it)[1]] = (*it)[2];
  }
  for (auto it = std::sregex_iterator(b.proc.output.begin(), b.proc.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    cb[(*it)[1]] = (*it)[2];
  }
  EXPECT_EQ(ca.size(), 4u) << a.proc.output;
  EXPECT_EQ(ca, cb);
  // Data-parallel replicas hold the same parameters: ranks 0 and 2 are (dp 0, tp 0), (dp 1, tp 0).
  EXPECT_EQ(ca["0"], ca["2"]);
  EXPECT_EQ(ca["1"], ca["3"]);
  EXPECT_NE(ca["0"], ca["1"]);  // different tensor-parallel shards
}

TEST(TrainPrecision, Fp16OverflowSkipsTheStepAndLowersTheScale) {
  // A scale of 2^24 overflows fp16 gradients (max 65504) until it has been halved enough.
  auto r = train(
      2, {"--dp", "2", "--micro-batch", "4", "--precision", "fp16", "--loss-scale", "16777216"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  ASSERT_EQ(r.steps.size(), 20u);
  EXPECT_TRUE(r.steps[0]["skipped"].get<bool>());
  EXPECT_EQ(r.steps[0]["loss_scale"].get<double>(), 16777216.0);
  // Hysteresis 2 (DeepSpeed's default): the first overflow only skips the step, the second
  // halves the scale.
  EXPECT_TRUE(r.steps[1]["skipped"].get<bool>());
  EXPECT_EQ(r.steps[1]["loss_scale"].get<double>(), 16777216.0);
  EXPECT_EQ(r.steps[2]["loss_scale"].get<double>(), 8388608.0);
  int skipped = 0;
  for (auto& s : r.steps) skipped += s["skipped"].get<bool>();
  EXPECT_GE(skipped, 2);
  EXPECT_FALSE(r.steps.back()["skipped"].get<bool>());
  EXPECT_EQ(r.steps.back()["skipped_total"].get<int>(), skipped);
  // Skipped steps do not move the parameters: the loss only starts falling after them.
  EXPECT_LT(r.steps.back()["loss"].get<double>(), r.steps[0]["loss"].get<double>() - 0.3);
}

// Step 0's overflow is tolerated (hysteresis 2), steps 1 and 2 halve 2^24 to the minimum 2^22,
// and step 3's overflow at the minimum stops the run.
TEST(TrainPrecision, LossScaleCollapseStopsTraining) {
  auto r = train(2, {"--dp", "2", "--micro-batch", "4", "--precision", "fp16", "--loss-scale",
                     "16777216", "--min-loss-scale", "4194304"});
  EXPECT_EQ(r.proc.exit_code, exit_code::kLossScale) << r.proc.output;
  EXPECT_NE(r.proc.output.find("Current loss scale already at minimum - cannot decrease scale "
                               "anymore. Exiting run. (gradient overflow at step 3 with the loss "
                               "scale already at its minimum 4194304"),
            std::string::npos)
      << r.proc.output;
}

TEST(TrainPrecision, Bf16Trains) {
  auto r = train(2, {"--dp", "2", "--micro-batch", "4", "--precision", "bf16"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_LT(r.steps.back()["loss"].get<double>(), r.steps[0]["loss"].get<double>() - 1.0);
  // bf16 rounding makes it close to, but not the same as, fp32.
  EXPECT_NEAR(r.steps.back()["loss"].get<double>(), reference().steps.back()["loss"].get<double>(),
              0.05);
}

TEST(TrainData, UnevenShardsHangTheRanksWithMoreBatchesAndDropLastFixesIt) {
  // 66 samples over 4 data-parallel ranks: ranks 0-1 get 17 (5 micro-batches of 4), ranks 2-3
  // get 16 (4). Run by epochs, ranks 2-3 finish after 4 steps while ranks 0-1 wait in the 5th
  // step's gradient all-reduce until the deadline (DeepSpeed #2223).
  std::vector<std::string> args = {"--dp",      "4",  "--micro-batch", "4",
                                   "--samples", "66", "--epochs",      "1"};
  // Ranks 2-3 wait in the final barrier meanwhile, with the same timeout: whichever side gives
  // up first aborts the job, and mpirun may kill the other side before it prints. Either report
  // names the hang: ranks 0-1 in the 5th step's all-reduce, or ranks 2-3 in the barrier after
  // their last step.
  auto hang = train(4, args, 1, {{"FAULTLINE_COMM_TIMEOUT_MS", "3000"}});
  EXPECT_EQ(hang.proc.exit_code, exit_code::kCommTimeout) << hang.proc.output;
  EXPECT_TRUE(std::regex_search(
      hang.proc.output,
      std::regex(
          R"(\[rank [01]\] comm timeout: all_reduce on group 'dp' \(seq 4, count \d+, dtype fp32, reduce avg\))"
          R"(|\[rank [23]\] comm timeout: barrier on group 'world')")))
      << hang.proc.output;
  args.push_back("--drop-last");
  auto fixed = train(4, args, 1, {{"FAULTLINE_COMM_TIMEOUT_MS", "3000"}});
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  EXPECT_EQ(fixed.steps.size(), 4u);
}

TEST(TrainEval, PeriodicEvalReportsAFallingHeldOutLoss) {
  auto r = train(2, {"--dp", "2", "--micro-batch", "4", "--eval-every", "10"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  ASSERT_TRUE(r.steps[9].contains("eval_loss")) << r.steps[9].dump();
  ASSERT_TRUE(r.steps[19].contains("eval_loss"));
  EXPECT_FALSE(r.steps[10].contains("eval_loss"));
  EXPECT_LT(r.steps[19]["eval_loss"].get<double>(), r.steps[9]["eval_loss"].get<double>());
  EXPECT_LT(r.steps[19]["eval_loss"].get<double>(), std::log(64.0) - 0.5);
}

TEST(TrainConfigErrors, ImpossibleLayoutsAreRefusedNamingTheSizes) {
  auto r = train(4, {"--tp", "3"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("invalid layout: dp 1 x tp 3 x pp 1 = 3 ranks, but the world has 4"),
            std::string::npos)
      << r.proc.output;
  r = train(2, {"--pp", "2", "--zero", "2"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("invalid layout: ZeRO stage 2 partitions across data-parallel "
                               "ranks, but dp is 1"),
            std::string::npos)
      << r.proc.output;
}

// Stages 2-3 reduce each micro-batch during its backward, a pipeline once after its schedule:
// grad_sync micro_batch is refused there, naming the key and the run's stage and pp.
TEST(TrainConfigErrors, GradSyncEveryMicroBatchNeedsAReplicatedUnpipelinedModel) {
  auto r =
      train(2, {"--dp", "2", "--zero", "2", "--grad-accum", "2", "--grad-sync", "micro_batch"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("workload.grad_sync (--grad-sync) micro_batch all-reduces a "
                               "replicated model's gradients after every micro-batch (allowed: "
                               "ZeRO stage 0-1 and pp 1; this run: stage 2, pp 1)"),
            std::string::npos)
      << r.proc.output;
  r = train(2, {"--pp", "2", "--grad-accum", "2", "--grad-sync", "micro_batch"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("this run: stage 0, pp 2"), std::string::npos) << r.proc.output;
}

// Where no GPU is visible, asking for one ends every rank with the device error, naming the rank
// and what CUDA said, before any rank joins the world (on a GPU machine gpu_train_test runs).
TEST(TrainDevice, CudaWithoutAGpuEndsEveryRankWithADeviceError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  TrainRun r = train(2, {"--device", "cuda"}, 2);
  EXPECT_EQ(r.proc.exit_code, exit_code::kDevice) << r.proc.output;
  // Every rank fails the same way at about the same time; the first to exit makes mpirun kill
  // the other, perhaps before it prints: at least one such error, each naming a rank of the job.
  const std::regex device_error(
      R"(faultline worker error \(device\): \[rank ([0-9]+)\] cuda:0 requested but)");
  int reported = 0;
  for (auto it = std::sregex_iterator(r.proc.output.begin(), r.proc.output.end(), device_error);
       it != std::sregex_iterator(); ++it) {
    EXPECT_LT(std::stoi((*it)[1]), 2) << r.proc.output;
    ++reported;
  }
  EXPECT_GE(reported, 1) << r.proc.output;
  EXPECT_TRUE(r.steps.empty());
}

}  // namespace
}  // namespace fl::test
