// Stop 50: training failures stated in prose, and the frameworks' own texts for them
// (harness/triage/signatures/stage4_training_prose.yaml). Each case is a sentence in the shape a
// reporter writes it, or a line as PyTorch or Megatron-LM print it; with main's
// tables each was answered "none", with another symptom, or without citing the row.
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace fl::triage {
namespace {

using test::SignatureCase;
using test::tables;
using test::top_cites;

using test::run;

// {name, text, stage (0: not checked), top symptom, top root cause ("": not checked), the
// signature cited on line 1 as the top symptom's evidence ("": not checked)}.
const SignatureCase kProse[] = {
    // torch/nn/utils/clip_grad.py, clip_grad_norm_(error_if_nonfinite=True).
    {"ANonFiniteGradientNormIsATrainingExecutionError",
     "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so "
     "it cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
     "anyway, set `error_if_nonfinite=False`\n",
     4, "4.4", "", "torch-clip-grad-norm-nonfinite"},
    // Megatron-LM's training_log formats each loss with {:.6E}: an infinite loss prints INF.
    {"MegatronsIterationLogWithAnInfiniteLossIsFourFour",
     " iteration      200/  500000 | consumed samples:        51200 | elapsed time per iteration "
     "(ms): 1532.1 | learning rate: 1.499E-05 | global batch size:   256 | lm loss: INF | loss "
     "scale: 1.0 | grad norm: 3.112 | number of skipped iterations:   0 | number of nan "
     "iterations:   0 |\n",
     4, "4.4", "", "inf-loss"},
    {"TheTrainersLogOfAnInfiniteLossIsFourFour",
     "{'loss': inf, 'learning_rate': 1.9e-05, 'epoch': 0.31}\n", 4, "4.4", "", "inf-loss"},
    {"ALossStatedToBecomeInfIsFourFour",
     "The loss becomes inf after 200 steps with fp16 on 4 GPUs using deepspeed.\n", 4, "4.4", "",
     "inf-loss"},
    // A hang in words.
    {"ALogThatStopsPrintingIsAHang",
     "With DeepSpeed ZeRO-3 on 8 GPUs the training stops printing after step 120 and GPU "
     "utilization stays at 0.\n",
     4, "4.11", "", "stops-output-statement"},
    {"ABackwardThatWaitsForeverIsAHang",
     "After switching to Megatron-LM tensor parallel 4, the job waits forever in the first "
     "backward.\n",
     4, "4.11", "", "waits-forever-statement"},
    {"AStepThatWaitsIndefinitelyIsAHang",
     "With FSDP on two nodes rank 3 waits indefinitely in the optimizer step.\n", 4, "4.11", "",
     "waits-indefinitely-statement"},
    {"AnUnresponsiveRunIsAHang",
     "Our FSDP run becomes unresponsive after a few hundred iterations; nvidia-smi shows all ranks "
     "busy.\n",
     4, "4.11", "", "no-response-statement"},
    {"AnEpochThatNeverCompletesIsAHang",
     "The epoch never completes when training with torchrun on 2 nodes; no error is printed.\n", 4,
     "4.11", "", "never-completes-statement"},
    // A slowdown in words.
    {"AStepThatTakesLongerIsAPerformanceIssue",
     "Training with ColossalAI Gemini takes 3x longer per step than with DDP.\n", 4, "4.1", "",
     "takes-longer-statement"},
    {"ATrainingSpeedThatDropsIsAPerformanceIssue",
     "The training speed drops by half when I enable offload_optimizer in the DeepSpeed config.\n",
     4, "4.1", "", "speed-drop-statement"},
    {"ATokenRateThatDropsIsAPerformanceIssue",
     "With pipeline parallel 2 the tokens per second dropped from 3000 to 1200 per GPU.\n", 4,
     "4.1", "", "token-rate-drop-statement"},
    {"AThroughputStatedLowerIsAPerformanceIssue",
     "The throughput per GPU is much lower with 4 nodes than with 1 node in Megatron-LM.\n", 4,
     "4.1", "", "rate-lower-statement"},
    // Memory in words.
    {"HostMemoryThatExplodesIsAMemoryIssue",
     "The host memory explodes at the end of each epoch with FSDP CPU offload on 8 GPUs.\n", 4,
     "4.2", "", "memory-spike-statement"},
    // A loss curve that is off (the corpus convention: 4.1).
    {"ALossThatJumpsIsAPerformanceIssue",
     "With DeepSpeed on 8 GPUs the loss suddenly jumps to 10 at step 3000.\n", 4, "4.1", "",
     "loss-rises-statement"},
    // megatron/core/distributed/param_and_grad_buffer.py, the rerun state machine's Inf check.
    {"MegatronsInfiniteGradNormCheckIsFourFour",
     "Unexpected result tensor(inf, device='cuda:3') (message='found Inf in local grad norm for "
     "bucket #0 in backward pass before data-parallel communication collective')\n",
     4, "4.4", "R4.3", "megatron-inf-or-large-grad-check"},
    {"AValidationLossMuchWorseIsAPerformanceIssue",
     "The validation loss is much worse with tensor parallelism than without.\n", 4, "4.1", "",
     "worse-result-statement"},
    // Second pass: more sentence shapes of the same four failures, and termination.
    {"RanksStillWaitingInACollectiveAreAHang",
     "One rank finishes the epoch and the others are still waiting in all_reduce.\n", 4, "4.11", "",
     "still-waiting-statement"},
    {"NoOutputForHalfAnHourIsAHang",
     "Nothing happens after the first iteration with DeepSpeed pipeline parallelism; no output "
     "for 30 minutes.\n",
     4, "4.11", "", "nothing-happens-statement"},
    {"TrainingThatDoesNotScaleIsAPerformanceIssue",
     "Multi-node training with NCCL does not scale from 2 to 4 nodes.\n", 4, "4.1", "",
     "does-not-scale-statement"},
    {"TwoNodesNoFasterThanOneIsAPerformanceIssue",
     "Training on 2 nodes is no faster than on 1 node with DeepSpeed.\n", 4, "4.1", "",
     "no-faster-statement"},
    {"AnMfuOfOnlyTwentyPercentIsAPerformanceIssue", "The MFU is only 20% with FSDP on 64 GPUs.\n",
     4, "4.1", "", "rate-stated-only-statement"},
    {"MemoryThatKeepsGoingUpIsAMemoryIssue",
     "After a few thousand steps the process memory keeps going up with DDP on 8 GPUs.\n", 4, "4.2",
     "", "memory-keeps-rising-statement"},
    {"ARunThatRunsOutOfRamIsAMemoryIssue",
     "With FSDP CPU offload the job runs out of RAM after 200 steps.\n", 4, "4.2", "",
     "out-of-ram-statement"},
    {"AModelThatDoesNotConvergeIsFourOne",
     "The model does not converge when training with DDP on 8 GPUs.\n", 4, "4.1", "",
     "does-not-converge-statement"},
    {"ALossThatDiffersBetweenLayoutsIsFourFour",
     "Training loss is different between 1 GPU and 8 GPUs with the same global batch size in "
     "Megatron-LM.\n",
     4, "4.4", "", "loss-differs-statement"},
    {"ARunThatCrashesSilentlyIsATermination",
     "Training crashes silently with DeepSpeed on 4 GPUs.\n", 4, "4.8", "",
     "silent-crash-statement"},
    {"TheTrainersLogOfAnInfiniteGradNormIsFourFour",
     "{'loss': 2.31, 'grad_norm': inf, 'learning_rate': 1.9e-05, 'epoch': 0.12}\n", 4, "4.4", "",
     "inf-loss"},
    // Stop 60: Chinese reports (Colossal-AI's users): "training llama-7b on 8 GPUs
    // reports an error, not enough GPU memory"; "with ZeRO-2 the GPU memory blows up at step 3".
    {"GpuMemoryNotEnoughInChineseIsAMemoryIssue", "8 卡训练 llama-7b 时报错，显存不足。\n", 4,
     "4.2", "R4.5", "gpu-memory-short-zh"},
    {"GpuMemoryBlownInChineseIsAMemoryIssue", "deepspeed zero2 训练到第3个step就爆显存了\n", 4,
     "4.2", "R4.5", "gpu-memory-short-zh"},
    // The same shortage while inferring (推理) or loading (加载) the model: the rows of stages 5
    // and 3 outrank the training row, as their English rows do for "out of memory".
    {"GpuMemoryShortWhileInferringInChineseIsFiveTwo", "用 deepspeed 推理时报错，显存不足。\n", 5,
     "5.2", "R5.1", ""},
    {"GpuMemoryShortWhileLoadingInChineseIsThreeFour", "用 deepspeed 加载模型时报错，显存不足。\n",
     3, "3.4", "R3.1", "prep-oom-zh"},
    // A path with no blank before it (base/text_mask.hpp ends a path at a multi-byte character:
    // before, the whole line was one path token, masked, and the row read "<path>").
    {"GpuMemoryShortBeforeAGluedPathInChineseIsAMemoryIssue",
     "8 卡训练时显存不足，日志在/data/run1/train.log里\n", 4, "4.2", "R4.5", "gpu-memory-short-zh"},
};

class Stage4Prose : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage4Prose, RanksItsSymptomFirst) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage4Prose, Stage4Prose, ::testing::ValuesIn(kProse),
                         test::case_name);

// The hang rows leave the set-up to stage 2 (a hang before or at the first collective, the
// corpus convention) and the rate rows leave inference to stage 5: the same words there do not
// make a training answer. The training sentence is the check that fails without the rows.
TEST(TriageStage4Prose, SetUpHangsAndInferenceSpeedKeepTheirStage) {
  const auto train =
      run("The backward of the second micro-batch waits forever on rank 2 with "
          "DeepSpeed pipeline parallelism.\n");
  ASSERT_EQ(train.kind, Result::Kind::kFound);
  EXPECT_EQ(train.stage, 4);
  EXPECT_TRUE(top_cites(train, "waits-forever-statement", 1));
  const auto setup =
      run("The job waits forever in init_process_group on the second node, "
          "waiting for the rendezvous.\n");
  EXPECT_NE(setup.stage, 4);
  const auto infer =
      run("With DeepSpeed inference the generation speed drops by half with kernel "
          "injection on 2 GPUs.\n");
  EXPECT_NE(infer.stage, 4);
}

// Stop 60: "卡住" (stuck) is said of set-up hangs as much as of training hangs, so the row's
// stage is a default (`reinfer`): a hang in the training loop stays 4.11, while the same word
// beside a launch on two nodes and the master address is answered in stage 2 (ColossalAI#4343's
// shape). Without the row the training sentence is an inferred answer that cites no row.
TEST(TriageStage4Prose, StuckInChineseIsAHangWhereTheWordsSayTraining) {
  const auto train =
      run("训练到第 200 个 iteration 后卡住了，loss 不再输出，backward 没有返回。\n");
  ASSERT_EQ(train.kind, Result::Kind::kFound);
  EXPECT_EQ(train.stage, 4);
  ASSERT_FALSE(train.symptoms.empty());
  EXPECT_EQ(train.symptoms[0].id, "4.11");
  EXPECT_TRUE(top_cites(train, "stuck-zh", 1));
  const auto setup =
      run("多机多卡训练，卡住不动\n"
          "torchrun --nproc_per_node=1 --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 "
          "--master_port=29500 train.py\n");
  ASSERT_EQ(setup.kind, Result::Kind::kFound);
  EXPECT_EQ(setup.stage, 2);
  EXPECT_FALSE(setup.overruled.empty());
}

// Questions in Chinese are not failure reports: "does NCCL support RDMA for multi-node training
// with torchrun?" (是否, whether, a healthy word) and "is GPU memory fully used normal?" (显存占满
// is how a healthy run is described: not a row's shortage).
TEST(TriageStage4Prose, QuestionsInChineseAreNotAnswered) {
  EXPECT_EQ(run("torchrun 多机训练时 nccl 是否支持 rdma？\n").kind, Result::Kind::kNone);
  EXPECT_EQ(run("显存占满是正常的吗？\n").kind, Result::Kind::kNone);
}

}  // namespace
}  // namespace fl::triage
