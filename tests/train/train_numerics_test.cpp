// Mixed precision, loss scaling and the optimizers under the real launcher: fp16 activations that
// outgrow 65504 overflow (NaN loss, skipped steps) where bf16 of the same run does not; with
// --raise-error-at-min-scale false the scaler keeps skipping at its minimum; SGD with momentum
// trains and ZeRO-1 partitions its buffer without changing the trajectory; the lr scaling rule
// multiplies the schedule by dp; bad optimizer options are refused naming the option.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

TrainRun train(int ranks, std::vector<std::string> args, int steps) {
  return run_train(FAULTLINE_TRAIN, ranks, std::move(args), steps);
}

bool finite_loss(const nlohmann::json& step) {
  return step["loss"].is_number() && std::isfinite(step["loss"].get<double>());
}

// lr 0.7 without clipping blows the weights up until the MLP outputs pass fp16's 65504 (step 21
// with the default seeds): the forward overflows, the loss is NaN and the step is skipped, and the
// scale (hysteresis 2: the first of the earlier gradient overflows only skipped) halves every step
// down to 1 at step 33. The same run in bf16 has fp32's range, so its loss stays finite and no
// step is skipped.
TEST(TrainPrecision, Fp16ActivationsOverflowWhereBf16DoesNot) {
  const std::vector<std::string> base = {
      "--dp", "2", "--micro-batch", "4", "--lr", "0.7", "--clip", "0", "--raise-error-at-min-scale",
      "false"};
  auto with = [&](const char* precision) {
    auto args = base;
    args.insert(args.end(), {"--precision", precision});
    return train(2, args, 36);
  };
  const TrainRun f16 = with("fp16"), b16 = with("bf16");
  ASSERT_EQ(f16.proc.exit_code, 0) << f16.proc.output;
  ASSERT_EQ(b16.proc.exit_code, 0) << b16.proc.output;
  ASSERT_EQ(f16.steps.size(), 36u);
  ASSERT_EQ(b16.steps.size(), 36u);
  int nonfinite = 0, skipped = 0;
  for (const auto& s : f16.steps) {
    nonfinite += !finite_loss(s);
    skipped += s["skipped"].get<bool>();
    if (!finite_loss(s)) {
      EXPECT_TRUE(s["skipped"].get<bool>()) << s.dump();
    }
  }
  EXPECT_GE(nonfinite, 5);
  // The scale fell to its minimum and, with raise_error_at_min_scale off, the run went on
  // skipping there instead of stopping.
  EXPECT_EQ(f16.steps.back()["loss_scale"].get<double>(), 1.0);
  EXPECT_TRUE(f16.steps.back()["skipped"].get<bool>());
  EXPECT_EQ(f16.steps.back()["skipped_total"].get<int>(), skipped);
  for (const auto& s : b16.steps) {
    EXPECT_TRUE(finite_loss(s)) << s.dump();
    EXPECT_FALSE(s["skipped"].get<bool>());
  }
}

TEST(TrainOptimizer, SgdWithMomentumTrainsAndZeroPartitionsItsBuffer) {
  const std::vector<std::string> sgd = {
      "--dp", "2", "--micro-batch", "4", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.5"};
  auto z0 = sgd, z1 = sgd;
  z1.insert(z1.end(), {"--zero", "1"});
  const TrainRun a = train(2, z0, 20), b = train(2, z1, 20);
  ASSERT_EQ(a.proc.exit_code, 0) << a.proc.output;
  ASSERT_EQ(b.proc.exit_code, 0) << b.proc.output;
  ASSERT_EQ(a.steps.size(), 20u);
  EXPECT_LT(a.steps.back()["loss"].get<double>(), a.steps[0]["loss"].get<double>() - 0.5);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const double want = a.steps[i]["loss"], got = b.steps[i]["loss"];
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "step " << i;
  }
  // Plain SGD (no state) moves the parameters differently from SGD with momentum.
  auto plain = sgd;
  plain.insert(plain.end(), {"--momentum", "0"});
  const TrainRun c = train(2, plain, 20);
  ASSERT_EQ(c.proc.exit_code, 0) << c.proc.output;
  EXPECT_NE(c.steps.back()["loss"].get<double>(), a.steps.back()["loss"].get<double>());
  EXPECT_LT(c.steps.back()["loss"].get<double>(), c.steps[0]["loss"].get<double>());
}

TEST(TrainOptimizer, LinearLrScalingMultipliesTheScheduleByDp) {
  const TrainRun r =
      train(2, {"--dp", "2", "--lr", "0.01", "--lr-scaling", "linear", "--warmup-steps", "0"}, 2);
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_NEAR(r.steps[0]["lr"].get<double>(), 0.02, 1e-7);
}

// workload.grad_norm under tensor parallelism (workloads/train/grad_norm.hpp): FSDP2 puts the
// shards on the ('dp', 'tp') mesh and the parameters outside the TP plan on the ('dp',) submesh;
// clip_grad_norm_'s stack refuses the two, and the norm per mesh is faultline's flat norm.
TEST(TrainOptimizer, GradNormOverTheTensorParallelMeshes) {
  const std::vector<std::string> tp2 = {"--dp", "2", "--tp", "2", "--clip", "0.05"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = tp2;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const TrainRun stacked = train(4, with({"--grad-norm", "dtensor_stack"}), 2);
  EXPECT_NE(stacked.proc.exit_code, 0);
  EXPECT_NE(stacked.proc.output.find(
                "ValueError: All operands in aten.stack.default must have the same mesh, but got "
                "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp')) and "
                "DeviceMesh('cpu', [0, 2], mesh_dim_names=('dp',))."),
            std::string::npos)
      << stacked.proc.output;
  for (const char* zero : {"0", "2"}) {
    const TrainRun flat = train(4, with({"--zero", zero}), 3);
    const TrainRun per_mesh =
        train(4, with({"--zero", zero, "--grad-norm", "dtensor_per_mesh"}), 3);
    ASSERT_EQ(flat.proc.exit_code, 0) << flat.proc.output;
    ASSERT_EQ(per_mesh.proc.exit_code, 0) << per_mesh.proc.output;
    ASSERT_EQ(flat.steps.size(), per_mesh.steps.size());
    for (size_t i = 0; i < flat.steps.size(); ++i) {
      const double want = flat.steps[i]["grad_norm"], got = per_mesh.steps[i]["grad_norm"];
      EXPECT_GT(want, 0.05) << "zero " << zero << " step " << i;
      EXPECT_NEAR(got, want, 1e-6 * want) << "zero " << zero << " step " << i;
      EXPECT_NEAR(per_mesh.steps[i]["loss"].get<double>(), flat.steps[i]["loss"].get<double>(),
                  1e-6)
          << "zero " << zero << " step " << i;
      EXPECT_EQ(per_mesh.steps[i]["comm_ops"].get<int>(), flat.steps[i]["comm_ops"].get<int>() + 1)
          << "zero " << zero << " step " << i;
    }
  }
  const TrainRun pp = train(4, {"--tp", "2", "--pp", "2", "--grad-norm", "dtensor_per_mesh"}, 1);
  EXPECT_EQ(pp.proc.exit_code, exit_code::kUsage) << pp.proc.output;
  EXPECT_NE(pp.proc.output.find("workload.grad_norm dtensor_per_mesh (--grad-norm) with tp 2 and "
                                "pp 2 is not modelled"),
            std::string::npos)
      << pp.proc.output;
}

TEST(TrainOptimizer, BadOptionsAreRefusedNamingTheOption) {
  TrainRun r = train(1, {"--optimizer", "lamb"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("--optimizer: 'lamb' is not supported (allowed: adamw, sgd, muon)"),
            std::string::npos)
      << r.proc.output;
  r = train(1, {"--momentum", "0.9"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("--momentum 0.9 applies to --optimizer sgd or muon only"),
            std::string::npos)
      << r.proc.output;
  r = train(1, {"--hysteresis", "-1"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("--hysteresis: -1 is not allowed"), std::string::npos)
      << r.proc.output;
}

// Stop 56: DeepSpeed's batch triangle. A train_batch_size written for another dp stops every rank
// before step 0 in DeepSpeed's words; the product itself, or 0 (derived), trains.
TEST(TrainBatch, ATrainBatchSizeThatIsNotMicroTimesAccumulationTimesDpIsRefused) {
  TrainRun r = train(2, {"--dp", "2", "--micro-batch", "4", "--train-batch-size", "16"}, 1);
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("AssertionError: Check batch related parameters. train_batch_size "
                               "is not equal to micro_batch_per_gpu * gradient_acc_step * "
                               "world_size 16 != 4 * 1 * 2"),
            std::string::npos)
      << r.proc.output;
  EXPECT_TRUE(r.steps.empty());
  for (const char* ok : {"8", "0"}) {
    r = train(2, {"--dp", "2", "--micro-batch", "4", "--train-batch-size", ok}, 1);
    EXPECT_EQ(r.proc.exit_code, 0) << ok << ": " << r.proc.output;
  }
}

// Stop 80: deepspeed.initialize's optimizer wrapper (optimizer_wrapper.hpp). A bf16 pipeline at
// ZeRO stage 1 with DeepSpeed's default accumulation gets DeepSpeedZeroOptimizer: on 0.9.2 its
// first stage fails the first backward on clear_lp_grads, with no step done; from 0.11.2 (the
// newest when no version is stated) it trains. fp32 accumulation gives BF16_Optimizer and
// trains, except where 0.8.3's ReduceGrads raises NotImplementedError on every rank; a data-type
// mix the release refused stops every rank at initialize (exit 2).
TEST(TrainOptimizer, Bf16PipelineAtZeroOneByRelease) {
  const std::vector<std::string> layout = {"--dp",          "2", "--pp",         "2",
                                           "--zero",        "1", "--precision",  "bf16",
                                           "--micro-batch", "2", "--grad-accum", "2"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = layout;
    args.insert(args.end(), more.begin(), more.end());
    return train(4, args, 2);
  };
  TrainRun r = with({"--deepspeed-version", "0.9.2"});
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.output.find("AttributeError: 'DeepSpeedZeroOptimizer' object has no attribute "
                               "'clear_lp_grads'"),
            std::string::npos)
      << r.proc.output;
  EXPECT_TRUE(r.steps.empty());
  r = with({});
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.steps.size(), 2u);
  r = with({"--grad-accum-dtype", "fp32", "--deepspeed-version", "0.9.2"});
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.steps.size(), 2u);
  r = with({"--grad-accum-dtype", "fp32", "--deepspeed-version", "0.8.3"});
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.output.find("the pipeline engine's ReduceGrads under bf16"), std::string::npos)
      << r.proc.output;
  r = with({"--grad-accum-dtype", "fp32", "--deepspeed-version", "0.8.0"});
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("NotImplementedError: Model data type and gradient accumulation "
                               "data type must be equal to use ZeRO"),
            std::string::npos)
      << r.proc.output;
}

}  // namespace
}  // namespace fl::test
