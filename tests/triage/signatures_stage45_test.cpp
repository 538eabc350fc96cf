// The general stage-4 and stage-5 signatures: each ranks its symptom first on a line as the
// framework itself prints it (the texts come from ProcessGroupNCCL.cpp, NCCL's
// ncclGetErrorString, DeepSpeed's stage3.py, module_inject and inference_context.h, and
// Megatron-LM's rerun state machine and text generation API), not on a line copied from one issue.
// The cases of one shape (the text, the answer it must rank first) are rows of kStage4 and
// kStage5; what checks more (the 2nd/3rd candidate, two texts, a folder of ranker tables, no
// failure) is a test of its own.
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fl::triage {
namespace {

using test::cites;
using test::SignatureCase;
using test::tables;
using test::top_cites;

using test::run;

// {name, text, stage (0: not checked), top symptom, top root cause ("": not checked), the
// signature cited on line 1 as the top symptom's evidence ("": not checked)}.
const SignatureCase kStage4[] = {
    {"AWatchdogHeartbeatTimeoutIsAHang",
     "[rank0]:[E1118 20:32:23.957 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID 0(default_pg) "
     "Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
     "workMetaList_.size()=2\n",
     4, "4.11", "", "c10d-heartbeat-monitor"},
    {"TheCollectiveOrderHintPointsAtMisalignedRanks",
     "[rank3]:[E710 18:00:32.603 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank "
     "3] Received a dump signal due to a collective timeout from this local rank and we will try "
     "our best to dump the debug info. Last enqueued NCCL work: 59998, last completed NCCL work: "
     "59957.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
     "across ranks, the order of collectives is not same for all ranks or the scheduled "
     "collective, for some reason, didn't run.\n",
     0, "4.11", "R4.6", "c10d-collective-order-hint"},
    {"ZeroThreeCacheFlushesAreMemoryPressure",
     "[2023-06-01 02:36:49,208] [WARNING] [stage3.py:1826:step] 1 pytorch allocator cache "
     "flushes since last step. this happens when there is high memory pressure and is "
     "detrimental to performance.\n",
     0, "4.2", "R4.5", "ds-allocator-cache-flushes"},
    {"MegatronsNanCheckIsATrainingExecutionError",
     "Rank 3, node gpu-17, device 3, iteration 1201: Unexpected result tensor(nan, "
     "device='cuda:3') (message='found NaN in local grad norm for bucket #0 in backward pass "
     "before data-parallel communication collective')\n",
     0, "4.4", "R4.3", "megatron-nan-check"},
    // stage4_training_general.yaml (stop 47): rows for families of messages. On the tables before
    // them, each of these lines was read as another stage.
    // DeepSpeedEngine.__getattr__'s message for a method the engine does not have.
    {"AnAttributeErrorOfTheEngineIsAStageFourRuntimeError",
     "AttributeError: 'DeepSpeedEngine' object has no attribute 'save_pretrained'\n", 4, "4.3", "",
     "attribute-error-on-object"},
    {"AZeroThreeParameterAttributeErrorIsAStageFourRuntimeError",
     "[rank0]: AttributeError: 'Parameter' object has no attribute 'ds_id'\n", 4, "4.3", "", ""},
    // Stop 47 (round 2). Gradients a step produced reported wrong: DeepSpeed's PipelineEngine
    // summing over micro-batches, data-parallel gradients left unreduced; no other row answers.
    {"GradientsSummedOverMicroBatchesAreATrainingExecutionError",
     "With gradient_accumulation_steps=4 in the PipelineEngine the gradients are summed instead "
     "of averaged over the micro-batches, so grad_norm is 4x too large\n",
     4, "4.4", "", "gradients-reported-wrong"},
    {"GradientsNotSyncedAcrossRanksAreATrainingExecutionError",
     "With data parallelism on 2 nodes the gradients of the embedding are not synced across "
     "ranks\n",
     4, "4.4", "", "gradients-reported-wrong"},
    // A hang at a point of the step outranks the SIGABRT the watchdog ends it with (4.7/4.8).
    {"AHangAtBackwardBeforeTheAbortIsAHang",
     "DDP training hangs at loss.backward() for 30 minutes, and then:\n"
     "torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: "
     "4242) of binary: /usr/bin/python3\n",
     4, "4.11", "", ""},
    // Stop 48 (stage4_training_errors.yaml): messages read in PyTorch's and DeepSpeed's sources.
    // With the tables before them, each of these texts got no answer. A RuntimeError or
    // AssertionError line cites its generic marker first, so those cases check no signature.
    // DDP's reducer (reducer.cpp): a parameter's gradient hook fired twice in one backward.
    {"DdpReadyOnlyOnceIsARuntimeError",
     "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of "
     "the following reasons: 1) Use of a module parameter outside the `forward` function.\n",
     4, "4.3", "R4.2", ""},
    // DeepSpeed ZeRO-1/2 (stage_1_and_2.py): two backward passes over shared parameters.
    {"ZeroGradientReducedTwiceIsARuntimeError",
     "AssertionError: The parameter 447 has already been reduced. Gradient computed twice for "
     "this partition. Multiple gradient reduction is currently not supported\n",
     4, "4.3", "R4.2", ""},
    // ZeRO-3's parameter coordinator: the modules ran in another order than its trace.
    {"ZeroThreeFetchTraceErrorIsARuntimeError", "RuntimeError: tracing error at step 42: \n", 4,
     "4.3", "R4.6", ""},
    // torch.save's zip writer (inline_container.cc) on a full disk.
    {"ATorchSaveWriteFailureIsACheckpointFailure",
     "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed "
     "writing file data/37: file write failed\n",
     4, "4.10", "R4.5", "torch-save-write-failed"},
    // torch.elastic's agent stopped by a signal from outside (the scheduler, the host's OOM).
    {"AnElasticDeathSignalIsAnUnexpectedTermination",
     "WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down "
     "workers\n",
     4, "4.8", "", "elastic-death-signal"},
    // autograd's _make_grads: the gradient given to backward() has another shape.
    {"AGradOutputShapeMismatchIsATensorMismatch",
     "RuntimeError: Mismatch in shape: grad_output[0] has a shape of torch.Size([4, 1024]) and "
     "output[0] has a shape of torch.Size([]).\n",
     4, "4.6", "", "autograd-grad-shape-mismatch"},
    // ATen's dtype check when mixed precision leaves one operand in fp32.
    {"AMixedPrecisionDtypeMismatchIsATensorMismatch",
     "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != "
     "c10::BFloat16\n",
     4, "4.6", "", "dtype-mismatch-in-op"},
    // ATen's expand check: tensors that disagree in one dimension, in training. (Stop 51: the
    // line alone is no stage's: since the fresh dev issues joined tune, learned stage-5 words
    // 'dimension' and 'tensor' outweigh the row's weak 0.9, and stage 5 is inferred.)
    {"AnExpandSizeMismatchIsATensorMismatch",
     "RuntimeError: The expanded size of the tensor (2048) must match the existing size (1024) at "
     "non-singleton dimension 1.  Target sizes: [4, 2048].  Tensor sizes: [4, 1024]\n"
     "Training with ZeRO-2 on 8 GPUs; it fails in the first backward.\n",
     4, "4.6", "R4.6", "tensor-shape-mismatch-family"},
    // torch.multiprocessing.spawn's ProcessExitedException for a worker killed by a signal.
    {"ASpawnedWorkerKilledIsAnUnexpectedTermination",
     "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
     "SIGKILL\n",
     4, "4.8", "", "spawn-process-terminated"},
    // Colossal-AI's GeminiDDP after a backward that left parameters unreduced; the Gemini
    // plugin's name on the same line used to answer a memory issue (4.2).
    {"GeminiGradientsNotSynchronizedAreATrainingExecutionError",
     "RuntimeError: ('ZERO DDP error: the synchronization of gradients doesn't exit properly.', "
     "'The most possible reason is that the model is not compatible with GeminiDDP.\\n', "
     "'Reduction failed at followed parameters:\\n\\tmodel.layers.1.mlp.experts.3.w1.weight')\n",
     4, "4.4", "", "gemini-gradient-sync-failed"},
    // c10d's ProcessGroup base class for a collective the backend lacks (an old PyTorch under
    // ZeRO-3, or gloo): an incompatibility, not the stage's common runtime error.
    {"ACollectiveTheBackendLacksIsAnIncompatibility",
     "RuntimeError: ProcessGroup gloo does not support _allgather_base\n", 4, "4.12", "R4.2", ""},
    // Stop 48 (round 2): pytorch's own texts. Activation checkpointing's recompute check
    // (torch/utils/checkpoint.py) was answered 5.3 by the words "different" and "metadata".
    {"ARecomputeWithOtherShapesIsATensorMismatch",
     "torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the "
     "following tensors have different metadata than during the forward pass.\n",
     4, "4.6", "R4.2", "recompute-metadata-mismatch"},
    // torch.amp's GradScaler.step with no gradient to unscale: a training step that went wrong.
    {"AGradScalerWithoutInfChecksIsATrainingExecutionError",
     "AssertionError: No inf checks were recorded for this optimizer.\n", 4, "4.4", "R4.6",
     "gradscaler-no-inf-checks"},
    // c10d's monitored barrier naming the rank that did not arrive: a hang, not a launch failure.
    {"ARankThatMissesTheMonitoredBarrierIsAHang",
     "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms\n", 4, "4.11",
     "R4.6", "monitored-barrier-failed"},
    // Stop 49: c10's "CUDA error: <the runtime's string>" as a reporter retypes it ("Cuda
    // error"); with main's tables only the tiny RuntimeError marker matched: no answer.
    {"ARetypedCudaErrorIsARuntimeError", "RuntimeError: Cuda error: unspecified launch failure\n",
     4, "4.3", "", "cuda-error-generic"},
    // A ZeRO-3 run named with no error text: a performance report first (the study's 4.1 share
    // is above 4.2's), memory second; main's tables put 4.2 first.
    {"AZeroThreeRunStatedAloneIsAPerformanceReportFirst",
     "We fine-tune with ZeRO stage 3 and bf16 on two nodes of eight GPUs.\n", 4, "4.1", "",
     "zero3-statement"},
    // Stop 49: c10d refusing a host tensor in an NCCL collective (main's tables: no answer;
    // newer ProcessGroupNCCL raises it as a ValueError). PyTorch 2's wording is a test below.
    {"AHostTensorInAnNcclCollectiveIsARuntimeError", "ValueError: Tensors must be CUDA and dense\n",
     4, "4.3", "R4.4", "c10d-host-tensor-in-collective"},
    // TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch check without the SequenceNumber fingerprint.
    {"CollectivesThatDifferAcrossRanksAreACommunicationError",
     "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
     "collective: CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[1024], "
     "TensorDtypes=Float), but Rank 1 is running collective: "
     "CollectiveFingerPrint(OpType=BROADCAST, TensorShape=[1])\n",
     4, "4.7", "R4.6", "c10d-collectives-mismatch"},
    // DeepSpeedEngine.no_sync under ZeRO-2/3 (a trainer's gradient accumulation); main's tables
    // answered nothing (a 3.2 context match at 0.2, below the threshold).
    {"NoSyncUnderZeroPartitioningIsAnIncompatibility",
     "[rank0]: AssertionError: no_sync context manager is incompatible with gradient "
     "partitioning logic of ZeRO stage 2\n",
     4, "4.12", "R4.2", "ds-no-sync-with-zero-partitioning"},
    // Stop 49 (round 4): statements with no error text (main's tables: no answer, or 3.x/4.x
    // context below the threshold). Memory a step keeps:
    {"MemoryStatedNotReleasedIsAMemoryIssue",
     "After the backward pass the host memory is not released when activations are offloaded.\n", 4,
     "4.2", "", "memory-not-released-statement"},
    {"ActivationsThatCannotBeReleasedAreAMemoryIssue",
     "With full recomputation the activations of the MoE layer cannot be released.\n", 4, "4.2",
     "R4.4", "not-released-statement"},
    // A regression or lost overlap stated by words and numbers only.
    {"ARegressionBetweenVersionsIsAPerformanceReport",
     "Small-message all_reduce performance regression between 2.18 and 2.19 on H100.\n", 4, "4.1",
     "R4.8", "performance-regression-statement"},
    {"CollectivesThatNoLongerOverlapAreAPerformanceReport",
     "On two nodes the reduce-scatter does not overlap with the backward computation.\n", 4, "4.1",
     "", "no-speedup-statement"},
    // Losses or gradient norms that differ between layouts or ZeRO stages on the same data.
    {"LossesThatDifferBetweenLayoutsAreATrainingExecutionError",
     "Two layouts on the same data and seed give inconsistent training loss from the start.\n", 4,
     "4.4", "R4.4", "layout-dependent-loss-statement"},
    {"AGradNormThatGrowsUnderOneLayoutIsATrainingExecutionError",
     "The gradient norm abnormally increases with ZeRO-0 but not with ZeRO-1.\n", 4, "4.4", "R4.4",
     "grad-norm-growth-statement"},
    {"GradientsStatedNotAveragedAreATrainingExecutionError",
     "On two nodes the gradients are not averaged across the data-parallel ranks.\n", 4, "4.4",
     "R4.4", "grads-not-synchronised-statement"},
    // A loss that stays flat while the run trains: 4.1 by the corpus's convention (main: 4.4).
    {"ALossThatStaysFlatIsAPerformanceReportFirst",
     "The loss does not decrease after 2000 iterations with the interleaved schedule.\n", 4, "4.1",
     "", "loss-not-decreasing-statement"},
    // DeepSpeed's checkpoint reconstruction (utils/zero_to_fp32.py, checkpoint/ds_to_universal.py).
    {"ZeroToFp32WithAStageItHasNoKeyForIsACheckpointFailure", "ValueError: unknown zero stage 1\n",
     4, "4.10", "R4.8", "zero-to-fp32-refusal"},
    {"MissingOptimizerShardsAreACheckpointFailure",
     "ValueError: Expected 8 of '*_optim_states.pt' under 'out/global_step200' but found 6 files. "
     "Possibly due to an overwrite of an old checkpoint, or a checkpoint didn't get saved by one "
     "or more processes.\n",
     4, "4.10", "R4.4", "zero-optim-states-count"},
    {"AUniversalConversionIsACheckpointFailure",
     "python ds_to_universal.py --input_folder out/global_step200 --output_folder out/univ\n", 4,
     "4.10", "", "ds-to-universal"},
    {"ConvertingTheWeightsToFp32InProseIsACheckpointFailure",
     "Once training saved them I cannot convert the ZeRO-2 weights into fp32.\n", 4, "4.10", "R4.8",
     "convert-to-fp32-statement"},
    // Colossal-AI's Booster saving a run's state (main: stage 3 on the word "booster").
    {"ABoosterSavingTheOptimizerIsACheckpointFailure",
     "    booster.save_optimizer(optimizer, os.path.join(save_dir, \"optimizer\"), shard=True)\n",
     4, "4.10", "R4.4", "colossal-booster-checkpoint-io"},
    // Restoring a run's optimizer state (PyTorch's sharded/DCP loads) is a resume, 4.10.
    {"ASharedOptimizerStateLoadIsACheckpointFailure",
     "  File \"/usr/lib/python3/site-packages/torch/distributed/checkpoint/optimizer.py\", line "
     "281, in load_sharded_optimizer_state_dict\n",
     4, "4.10", "R4.4", "optimizer-state-load-trace"},
    // An ATen CUDA kernel's own assertion print (here nll_loss on a label past the classes), quoted
    // without the RuntimeError after it.
    {"AKernelsAssertionPrintIsARuntimeError",
     "/pytorch/aten/src/ATen/native/cuda/Loss.cu:242: nll_loss_forward_reduce_cuda_kernel_2d: "
     "block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n",
     4, "4.3", "R4.6", "cuda-kernel-assertion-print"},
};

const SignatureCase kStage5[] = {
    {"InferenceHeadsNotDivisibleByTheWorldIsAnExecutionFailure",
     "AssertionError: To run the model parallel across the GPUs, the attention_heads require to "
     "be divisible by the world_size!This is because the attention computation is partitioned "
     "evenly among the parallel GPUs.\n",
     5, "5.1", "R5.4", "ds-inference-heads-world-size"},
    {"TheInferenceWorkspaceOutOfMemoryIsAnInferenceMemoryIssue",
     "RuntimeError: Workspace can't be allocated, not enough memory\n", 0, "5.2", "",
     "ds-inference-workspace-oom"},
    {"MegatronsGenerationTokenLimitIsAnInferenceMemoryIssue",
     "ValueError: Too many tokens.  8192 is greater than 4096\n", 0, "5.2", "",
     "megatron-generation-too-many-tokens"},
    // Stop 47 (stage 5): settings alone, DeepSpeed's inference checkpoint loading, and the
    // engine's and MII's refusals, each as the framework prints or documents it.
    // The inference tutorial's init_inference call with kernel injection and no error text: the
    // report is about what the fused kernels output (5.3), not an execution failure (5.1).
    {"KernelInjectionSettingsAloneAreAboutTheOutput",
     "model = deepspeed.init_inference(model, mp_size=2, dtype=torch.half, "
     "replace_with_kernel_inject=True)\n",
     5, "5.3", "R5.2", "kernel-inject"},
    // DeepSpeed's SDLoader (runtime/state_dict_factory.py) merging model-parallel shards for
    // init_inference, and module injection refusing meta tensors: loading for inference (5.5),
    // not the data-preparation loading failure (3.1) the stage-3 meta-tensor row names.
    {"InferenceCheckpointMergeIsAModelLoadingIssue",
     "AssertionError: Invalid checkpoints and world size for sd merge\n", 0, "5.5", "R5.6",
     "ds-sd-loader-world-size"},
    {"InferenceMetaTensorsRefusedAreAModelLoadingIssue",
     "AssertionError: Meta tensors are not supported for this model currently.\n", 5, "5.5", "",
     "ds-meta-tensor-unsupported"},
    // DeepSpeed-MII's deployment check: replicas x tensor parallel must fit the GPUs.
    {"MiiReplicasThatDoNotFitAreAnExecutionFailure",
     "ValueError: Only able to place 0 replicas, but 2 replicas were requested.\n", 0, "5.1",
     "R5.1", "mii-replica-placement"},
    // Stop 47 (round 2): a pre-sharded TP checkpoint is the inference checkpoint family
    // (checkpoints_json, save_mp_checkpoint_path); results stated with words between.
    {"APreShardedCheckpointIsTheInferenceCheckpointFamily",
     "Loading the pre-sharded TP checkpoint back with init_inference fails on 8 GPUs.\n", 5, "5.5",
     "R5.6", "checkpoints-json"},
    {"InferenceResultsStatedInconsistentAreAnOutputInconsistency",
     "With kernel injection the inference results are totally inconsistent with the results "
     "without DeepSpeed.\n",
     5, "5.3", "R5.2", "inference-results-statement"},
    // Stop 48 (stage 5): AutoTP's own refusal (module_inject/auto_tp.py) names AutoTP, not the
    // inference engine; GPT-NeoX's decoded garbage; wrong output stated in a plain sentence.
    {"AnAutoTpRefusalIsAnExecutionFailure",
     "NotImplementedError: AutoTP gather_output does not yet support shaped sub-parameter "
     "layers.\n",
     5, "5.1", "", "inference-exception-same-line"},
    {"GptNeoXGarbageTokensAreAnOutputInconsistency",
     "generated: 'The capital of France is BytePtrFromString BytePtrFromStringamssymb "
     "BytePtrFromString errnoErr'\n",
     5, "5.3", "R5.2", "gpt-neox-garbage-tokens"},
    {"LogitsStatedDifferentAreAnOutputInconsistency",
     "With kernel injection on two GPUs the logits were completely different from one GPU.\n", 5,
     "5.3", "R5.2", "outputs-are-wrong-statement"},
    // The output judged in the singular, with what produced it between; a failure stated in
    // words on the line that names DeepSpeed's inference engine.
    {"TheOutputOfAKernelStatedDifferentIsAnOutputInconsistency",
     "The output of the fused attention kernel is different from the PyTorch reference when the "
     "mask pads the batch.\n",
     5, "5.3", "R5.2", "inference-output-statement"},
    {"AModelDeepSpeedInferenceDoesNotSupportIsAnExecutionFailure",
     "DeepSpeed Inference does not support the Mixtral model with kernel injection yet.\n", 5,
     "5.1", "R5.2", "inference-failure-statement"},
    // Stop 49 (round 4), stage5_inference_frameworks.yaml: inference outside init_inference. A
    // pass under torch.inference_mode on a DTensor model outranks the process-group line below
    // it (stage 2 alone); a failure stated about inference in words; Megatron-LM's sampling
    // script; a binding of DeepSpeed's transformer_inference op (pt_binding.cpp's DEF_OPS
    // names); memory and speed stated about inference (not the training loop's statements); a
    // setting passed to init_inference that changes nothing.
    {"AFailureUnderInferenceModeIsAnInferenceExecutionFailure",
     "[DTensor] aten.addmm failed under inference_mode on a 2-way tensor-parallel model\n"
     "    dist.init_process_group(\"nccl\", rank=rank, world_size=world_size)\n",
     5, "5.1", "R5.2", "inference-mode-failure"},
    {"AnInferenceFailureStatedInWordsIsAnExecutionFailure",
     "Batched inference of the 13B model on 4 GPUs fails after the first request.\n", 5, "5.1",
     "R5.2", "inference-failure-prose"},
    {"MegatronsGenerationScriptIsInference",
     "bash examples/generate_text.sh\n"
     "Traceback (most recent call last):\n"
     "KeyError: 'tokens'\n",
     5, "5.1", "", "megatron-generation-scripts"},
    {"MegatronsSamplingFlagsAreInference",
     "       --out-seq-length 1024 --top_p 0.9 --genfile samples.json\n"
     "KeyError: 'tokens'\n",
     5, "5.1", "", "inference-script-flags"},
    {"AnInferenceKernelBindingRejectingItsArgumentsIsAnExecutionFailure",
     "TypeError: qkv_gemm_fp16(): incompatible function arguments. The following argument types "
     "are supported:\n",
     5, "5.1", "R5.2", "ds-inference-kernel-binding"},
    {"MemoryStatedAboutInferenceIsAnInferenceMemoryIssue",
     "Inference of the 20B model on 4 GPUs takes far more memory per GPU than its share.\n", 5,
     "5.2", "R5.1", "inference-memory-statement"},
    {"SlownessStatedAboutInferenceIsAnInferencePerformanceAnomaly",
     "With tensor parallel 2 the inference is much slower than on one GPU.\n", 5, "5.4", "R5.2",
     "inference-slow-statement"},
    {"ASettingInitInferenceIgnoresIsAFunctionalCorrectnessIssue",
     "Passing a ZeRO-3 offload config to deepspeed.init_inference(model, zero=cfg) has no effect "
     "on the GPU memory used.\n",
     5, "5.9", "R5.2", "init-inference-no-effect"},
};

class Stage45Signature : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage45Signature, RanksItsSymptomFirst) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage4Signatures, Stage45Signature, ::testing::ValuesIn(kStage4),
                         test::case_name);
INSTANTIATE_TEST_SUITE_P(TriageStage5Signatures, Stage45Signature, ::testing::ValuesIn(kStage5),
                         test::case_name);

// The cases that check more than the top answer.

// Megatron-LM's divide() ("N is not divisible by M"): raised under a module's forward it is a
// tensor that does not split over the ranks (4.6, the context row citing both lines); alone it
// stays the stage-3 layout refusal (main's tables answered 3.2 both times).
TEST(TriageStage4Signatures, ADivisibilityAssertionUnderAForwardIsATensorMismatch) {
  const std::string error = "AssertionError: 96 is not divisible by 64\n";
  const auto r = run("  File \"/work/model/attention.py\", line 49, in forward\n" + error);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.6");
  EXPECT_TRUE(cites(r.symptoms[0], "forward-frame-context-divisible", 1));
  const auto alone = run(error);
  ASSERT_EQ(alone.kind, Result::Kind::kFound);
  EXPECT_EQ(alone.stage, 3);
}

TEST(TriageStage4Signatures, NcclRemoteErrorIsACommunicationError) {
  const auto r =
      run("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
          "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL "
          "version 2.19.3\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "4.7");
  EXPECT_EQ(r.root_causes.at(0).id, "R4.7");
  // "remote process exited": a peer rank may have died, so termination is a candidate too.
  ASSERT_GE(r.symptoms.size(), 3u);
  EXPECT_EQ(r.symptoms[2].id, "4.8");
  EXPECT_TRUE(cites(r.symptoms[2], "nccl-remote-error-text", 1));
}

// c10d's TORCH_CHECK when a CPU tensor reaches an NCCL-only group (PyTorch 2): the tables answer
// it (main's tables left it to the ranker's inferred stage; the RuntimeError marker is the line's
// first citation, so the row is checked by the answer's basis and score).
TEST(TriageStage4Signatures, NoBackendForTheCpuDeviceIsARuntimeErrorTheTablesName) {
  const auto r = run("RuntimeError: No backend type associated with device type cpu\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.3");
  EXPECT_GE(r.symptoms[0].score, 2.5);
  ASSERT_FALSE(r.root_causes.empty());
  EXPECT_EQ(r.root_causes[0].id, "R4.4");
}

// NCCL's communicator set-up (src/init.cc, bootstrap.cc, transport/nvls.cc) warns before any
// collective: stage 2's rows answer, and the training stage's any-WARN and error-return rows stay
// out (main's tables listed 4.7 second on each line).
TEST(TriageStage4Signatures, NcclSetUpWarningsAreNotTrainingCommunicationErrors) {
  for (const char* line :
       {"gpu-3:1234:1290 [0] bootstrap.cc:75 NCCL WARN Bootstrap : no socket interface found\n",
        "node2:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid "
        "argument'\n",
        "node2:242431:242475 [1] NCCL INFO init.cc:1277 -> 1\n"}) {
    const auto r = run(line);
    ASSERT_EQ(r.kind, Result::Kind::kFound) << line;
    EXPECT_EQ(r.stage, 2) << line;
    for (const auto& c : r.symptoms) {
      EXPECT_FALSE(cites(c, "nccl-warn", 1) || cites(c, "nccl-transport-return", 1))
          << c.id << " cites a stage-4 NCCL row on: " << line;
    }
  }
  // A WARN of the proxy thread during a run is still one.
  const auto r =
      run("gpu7:311:402 [3] proxy.cc:1496 NCCL WARN [Service thread] Error encountered progressing "
          "operation=Connect, res=3, closing connection\n");
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.7");
}

TEST(TriageStage4Signatures, MegatronsIterationLogWithoutNanIterationsIsNoFailure) {
  const auto r = run(
      " iteration      600/  500000 | consumed samples:         4800 | elapsed time per "
      "iteration (ms): 1549.5 | learning rate: 2.737E-05 | global batch size:     8 | lm loss: "
      "6.348289E+00 | loss scale: 131072.0 | grad norm: 2.961 | number of skipped iterations:   0 "
      "| number of nan iterations:   0 |\n");
  EXPECT_EQ(r.kind, Result::Kind::kNone);
}

TEST(TriageStage4Signatures, AWorkerEndedByASignalIsACommunicationErrorOrATermination) {
  // torch.distributed.elastic's line for a worker killed by SIGILL (no row of its own).
  const auto r =
      run("torch.distributed.elastic.multiprocessing.api:failed (exitcode: -4) local_rank: 0 (pid: "
          "1234) of binary: /usr/bin/python\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_GE(r.symptoms.size(), 2u);
  const std::string first_two = r.symptoms[0].id + " " + r.symptoms[1].id;
  EXPECT_NE(first_two.find("4.7"), std::string::npos) << first_two;
  EXPECT_NE(first_two.find("4.8"), std::string::npos) << first_two;
  EXPECT_TRUE(top_cites(r, "rank-died-on-a-signal", 1));
}

TEST(TriageStage5Signatures, AnOutOfMemoryNamedWithInferenceOutranksTheTrainingOom) {
  const auto r =
      run("DeepSpeed inference: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
          "1.50 GiB\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  EXPECT_EQ(r.symptoms.at(0).id, "5.2");
  EXPECT_EQ(r.root_causes.at(0).id, "R5.1");
  EXPECT_TRUE(cites(r.root_causes.at(0), "inference-oom-same-line", 1));
}

// Prose context: a stated hang is the training loop's (4.11) unless it names inference or
// generation, and then it is an inference execution failure (5.1).
TEST(TriageStage5Signatures, AHangStatedWithGenerationIsAnInferenceFailure) {
  const auto training = run("With ZeRO-3 on 2 GPUs the training hangs after 20 steps.\n");
  ASSERT_EQ(training.kind, Result::Kind::kFound);
  EXPECT_EQ(training.symptoms.at(0).id, "4.11");
  const auto inference = run("With ZeRO-3 on 2 GPUs model.generate() hangs after 20 tokens.\n");
  ASSERT_EQ(inference.kind, Result::Kind::kFound);
  EXPECT_EQ(inference.stage, 5);
  EXPECT_EQ(inference.symptoms.at(0).id, "5.1");
}

// A Python exception that names the inference engine on its own line is an inference execution
// failure; a path that merely holds "inference" (a JIT build's source file) is not.
TEST(TriageStage5Signatures, AnExceptionNamingTheInferenceEngineIsAnExecutionFailure) {
  const auto r = run("AttributeError: 'InferenceEngine' object has no attribute 'generate'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  EXPECT_EQ(r.symptoms.at(0).id, "5.1");
  EXPECT_TRUE(top_cites(r, "inference-exception-same-line", 1));
  const auto path =
      run("FileNotFoundError: [Errno 2] No such file or directory: '/opt/conda/lib/python3.10/"
          "site-packages/colossalai/kernel/extensions/pybind/inference/inference.cpp'\n");
  EXPECT_FALSE(!path.symptoms.empty() &&
               cites(path.symptoms.front(), "inference-exception-same-line", 1));
}

// An out-of-memory line that names the inference engine is the inference OOM row's (5.2); the
// exception row (5.1) leaves it alone, so 5.1 does not crowd the memory candidates (stop 48).
TEST(TriageStage5Signatures, AnInferenceOutOfMemoryIsNotAnExecutionFailureToo) {
  const auto r =
      run("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB during "
          "DeepSpeed inference\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "5.2");
  for (const auto& c : r.symptoms) {
    EXPECT_FALSE(cites(c, "inference-exception-same-line", 1)) << c.id;
  }
}

// The ranker with cues.yaml and priors.yaml of its own (the project's signature tables) on `text`.
Result with_ranker(const std::string& cues, const std::string& priors, const std::string& text) {
  namespace fs = std::filesystem;
  // One folder per process: ctest -j runs this file's tests side by side.
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / fmt::format("fl_triage_stage4_ranker_test.{}", ::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "cues.yaml") << cues;
  std::ofstream(dir / "priors.yaml") << priors;
  const Tables t = load_tables(default_signature_dir(), default_taxonomy_path(), dir.string());
  fs::remove_all(dir);
  return triage(Input{text, false, text.size()}, t);
}

// The stage prior (stage_prior_weight): with two stage-1 words against one stage-4 word, the
// words alone infer stage 1; weighted by how many more tune failures stage 4 has (30 against 2),
// the prior infers stage 4.
int inferred_stage(double prior_weight) {
  const Result r = with_ranker(
      fmt::format("settings:\n  stage_prior_weight: {}\nfailure: [fails]\ncontext: [deepspeed]\n"
                  "stages: {{1: [import, build], 4: [step]}}\n",
                  prior_weight),
      "issues: 32\nstage_symptoms:\n  \"1\": {\"1.1\": 2}\n  \"4\": {\"4.2\": 30}\n",
      "deepspeed: after the import and the build, the step fails\n");
  return r.kind == Result::Kind::kFound ? r.stage : 0;
}

TEST(TriageRankerStagePrior, TheWordsAloneInferTheStageWithMoreWords) {
  EXPECT_EQ(inferred_stage(0.0), 1);
}

TEST(TriageRankerStagePrior, ThePriorLeansTheInferredStageToTheLargerStage) {
  EXPECT_EQ(inferred_stage(1.0), 4);
}

// symptom_words: a word of 4.4 in the text puts 4.4 before the stage's most common symptom, with
// the word's line as its evidence.
Result filled(double word_weight) {
  return with_ranker(fmt::format("settings:\n  symptom_word_weight: {}\nfailure: [fails]\n"
                                 "context: [deepspeed]\nstages: {{4: [step]}}\n"
                                 "symptom_words: {{\"4.4\": [wobbl]}}\n",
                                 word_weight),
                     "issues: 12\nstage_symptoms:\n  \"4\": {\"4.11\": 10, \"4.4\": 2}\n",
                     "deepspeed train.py\nevery step wobbles and then the run fails\n");
}

TEST(TriageRankerSymptomWords, AStagesCommonSymptomComesFirstWithoutItsWords) {
  const Result r = filled(0.0);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "4.11");
}

TEST(TriageRankerSymptomWords, ASymptomsWordRanksItFirstWithTheLineItIsOn) {
  const Result r = filled(1.0);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_EQ(r.symptoms.at(0).id, "4.4");
  EXPECT_EQ(r.symptoms[0].basis.rfind("its words", 0), 0u) << r.symptoms[0].basis;
  ASSERT_FALSE(r.symptoms[0].evidence.empty());
  EXPECT_EQ(r.symptoms[0].evidence[0].line, 2u);
  EXPECT_EQ(r.symptoms[0].evidence[0].signature, "4.4 word 'wobbl'");
}

// priors.yaml's learned stage words are whole tokens: "mode" (learned for stage 1) does not count
// inside "model", so the stage-4 word decides.
TEST(TriageRankerLearnedWords, ALearnedWordCountsOnlyAsAWholeWord) {
  const std::string cues =
      "failure: [fails]\ncontext: [deepspeed]\nstages: {1: [import], 4: [step]}\n";
  const std::string priors =
      "issues: 12\nstage_symptoms:\n  \"1\": {\"1.1\": 6}\n  \"4\": {\"4.2\": 6}\n"
      "stage_words:\n  \"mode\": {\"1\": 2.0}\n";
  const Result inside = with_ranker(cues, priors, "deepspeed: the model step fails\n");
  ASSERT_EQ(inside.kind, Result::Kind::kFound);
  EXPECT_EQ(inside.stage, 4);
  const Result whole = with_ranker(cues, priors, "deepspeed: in this mode the step fails\n");
  ASSERT_EQ(whole.kind, Result::Kind::kFound);
  EXPECT_EQ(whole.stage, 1);
}

}  // namespace
}  // namespace fl::triage
