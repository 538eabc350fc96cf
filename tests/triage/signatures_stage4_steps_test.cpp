// Stop 52: a failure raised inside a training step is stage 4 even when the report also quotes its
// launch (a torchrun command line, torch.multiprocessing's spawn wrapper), whose words lean
// stage 2. The texts are in the shape PyTorch's autograd, DeepSpeed's pipeline engine and ZeRO-3
// hooks, Megatron-LM's training loop and nccl-tests print them (stage4_training_steps.yaml and the
// stage-4 words of cues.yaml); with main's tables and cues before this change each was read as
// another stage or ranked another symptom first.
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace fl::triage {
namespace {

using test::cites;
using test::run;

// A backward pass that raises under torch.multiprocessing.spawn (main: 2.1, from the spawn row).
TEST(TriageStage4Steps, ABackwardTracebackUnderSpawnIsAStepRuntimeError) {
  const auto r = run(
      "torch.multiprocessing.spawn.ProcessRaisedException:\n"
      "-- Process 0 terminated with the following error:\n"
      "  File \"/workspace/train.py\", line 64, in run\n"
      "    loss.backward()\n"
      "  File \"/opt/conda/lib/python3.10/site-packages/torch/_tensor.py\", line 522, in "
      "backward\n"
      "    torch.autograd.backward(\n"
      "  File \"/opt/conda/lib/python3.10/site-packages/torch/autograd/__init__.py\", line 266, in "
      "backward\n"
      "    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the "
      "backward pass\n"
      "RuntimeError: Function 'MulBackward0' returned an invalid gradient at index 0\n");
  test::expect_first(r, 4, "4.3", "training-step-backward-call", 4);
}

// DeepSpeed's pipeline engine frames with the job's torchrun line (main: 2.1, from the launch
// line's words).
TEST(TriageStage4Steps, PipelineEngineFramesOutweighTheTorchrunLine) {
  const auto r = run(
      "  File \"/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/pipe/engine.py\", line "
      "388, in train_batch\n"
      "    self._exec_schedule(sched)\n"
      "  File \"/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/pipe/engine.py\", line "
      "1422, in _exec_schedule\n"
      "    self._exec_instr(**cmd.kwargs)\n"
      "TypeError: 'NoneType' object is not subscriptable\n"
      "torchrun --nproc_per_node=8 --nnodes=1 --node_rank=0 --master_addr=127.0.0.1 "
      "--master_port=29500 train.py\n");
  test::expect_first(r, 4, "4.3", "training-loop-frame", 1);
}

// ZeRO-3's parameter-fetch hooks in a step (main: 1.1, from the site-packages paths' words).
TEST(TriageStage4Steps, ZeroThreeSubmoduleHookFramesAreAStepRuntimeError) {
  const auto r =
      run("  File \"/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/"
          "parameter_offload.py\", line 474, in _pre_forward_module_hook\n"
          "    self.pre_sub_module_forward_function(module)\n"
          "  File \"/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/"
          "partitioned_param_coordinator.py\", line 306, in fetch_sub_module\n"
          "    assert param.ds_status == ZeroParamStatus.AVAILABLE, param.ds_summary()\n"
          "AssertionError: {'id': 3, 'status': 'INFLIGHT', 'numel': 4096}\n");
  test::expect_first(r, 4, "4.3", "training-loop-frame", 1);
}

// An out-of-memory error raised in Megatron-LM's train_step stays 4.2 first; the step's frame
// adds the runtime error as a candidate of its own (main: no 4.3 from the frame).
TEST(TriageStage4Steps, OutOfMemoryInTheTrainStepStaysMemoryFirst) {
  const auto r = run(
      "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
      "a total capacity of 79.10 GiB of which 1.2 GiB is free. Of the allocated memory 70.3 GiB "
      "is allocated by PyTorch, and 5.1 GiB is reserved by PyTorch but unallocated.\n"
      "  File \"/usr/local/lib/python3.10/dist-packages/megatron/training/training.py\", line "
      "1012, in train_step\n");
  test::expect_first(r, 4, "4.2");
  const auto step = std::find_if(r.symptoms.begin(), r.symptoms.end(),
                                 [](const Candidate& c) { return c.id == "4.3"; });
  ASSERT_NE(step, r.symptoms.end());
  EXPECT_TRUE(cites(*step, "training-loop-frame", 2));
}

// An nccl-tests run with its bus bandwidth is a performance report as often as a hang: with the
// bandwidth shown, 4.1 first (main: the run's row named 4.11 alone).
TEST(TriageStage4Steps, AnNcclTestsRunWithItsBandwidthIsPerformance) {
  const auto r =
      run("mpirun -np 16 -H node1:8,node2:8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1\n"
          "# Avg bus bandwidth    : 11.8043\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_EQ(r.symptoms[0].id, "4.1");
  EXPECT_EQ(r.symptoms[1].id, "4.11");
}

// nccl-tests' result rows alone: the collectives ran, so stage 4, and the numbers are about
// bandwidth (main: no signature matched).
TEST(TriageStage4Steps, NcclTestsResultRowsAreAMeasuredCollective) {
  const auto r =
      run("    33554432       8388608     float     sum      -1   4821.3    6.96   13.05      0   "
          "4790.2    7.00   13.14      0\n"
          "    67108864      16777216     float     sum      -1   9650.8    6.95   13.04      0   "
          "9622.5    6.97   13.08      0\n");
  test::expect_first(r, 4, "4.1", "nccl-tests-result-row", 1);
}

// A fine-tuning run's forward, with the torchrun line that started it (main: 2.1).
TEST(TriageStage4Steps, AFineTuningForwardIsTrainingNotLaunch) {
  const auto r = run(
      "Fine-tuning with the autograd profiler on: the forward of the first micro-batch raises an "
      "error\n"
      "torchrun --nproc_per_node=8 --master_port=29501 finetune.py\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
}

}  // namespace
}  // namespace fl::triage
