// faultline triage's general signatures for stages 1-3: each test feeds a line the framework or
// library itself prints (copied from its source: DeepSpeed's op_builder and runner,
// torch.distributed, NCCL's socket layer, Colossal-AI's extensions, Megatron-LM's checkpointing,
// transformers' DeepSpeed integration) and expects that signature to rank its symptom first, so a
// report nobody wrote a signature for is still recognised.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

namespace fl::triage {
namespace {

using test::SignatureCase;
using test::tables;

using test::run;

// The answer's top symptom and root cause, and whether `signature` matched line `line` as
// evidence for that symptom.
struct Top {
  std::string symptom, root_cause;
  bool evidence = false;
};

Top top_of(const std::string& text, const std::string& signature, size_t line = 1) {
  const auto r = run(text);
  Top t;
  if (r.kind != Result::Kind::kFound || r.symptoms.empty()) return t;
  t.symptom = r.symptoms.front().id;
  if (!r.root_causes.empty()) t.root_cause = r.root_causes.front().id;
  t.evidence = test::cites(r.symptoms.front(), signature, line);
  return t;
}

// One line the framework prints and the answer the signature written from it must rank first:
// the symptom, its root cause, and that signature's match on line 1 as its evidence. The stage is
// not checked (0): the symptom names it.
const SignatureCase kLines[] = {
    {"DeepSpeedOpsBuiltForAnotherTorchAreAnImportFailureOfVersions",
     "RuntimeError: PyTorch version mismatch! DeepSpeed ops were compiled and installed with a "
     "different version than what is being used at runtime. Please re-install DeepSpeed or "
     "switch torch versions. Install torch version=2.1, Runtime torch version=2.3\n",
     0, "1.2", "R1.1", "ds-op-version-mismatch"},
    {"ColossalAiWithoutCudaHomeIsABuildFailureOfTheEnvironmentPath",
     "[extension] CUDA_HOME is not found. You need to export CUDA_HOME environment variable or "
     "install CUDA Toolkit first in order to build/load CUDA extensions\n",
     0, "1.1", "R1.4", "colossalai-ext-cuda-home"},
    {"AMissingRendezvousVariableIsALaunchSetupFailure",
     "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
     "variable MASTER_ADDR expected, but not set\n",
     0, "2.1", "R2.1", "env-rendezvous-var-unset"},
    {"NcclsSharedMemorySegmentThatDevShmCannotHoldIsASetupFailure",
     "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n", 0,
     "2.1", "R2.3", "nccl-shm-setup"},
    {"PyTorchsLastErrorOfTheSharedMemorySetUpIsASetupFailure",
     "Error while creating shared memory segment /dev/shm/nccl-1YsMbG (size 7340384)\n", 0, "2.1",
     "R2.3", "nccl-shm-setup"},
    {"AnEmptyPeerAddressInNcclsSocketLayerIsASetupFailure",
     "misc/socket.cc:537 NCCL WARN ncclSocketInit: connecting to address  with family 1 is "
     "neither AF_INET(2) nor AF_INET6(10)\n",
     0, "2.1", "R2.3", "nccl-socket-family"},
    {"ADeviceTheDeepSpeedRunnerDoesNotHaveIsALauncherConfigurationError",
     "ValueError: No slot '2' specified on host 'localhost'\n", 0, "2.1", "R2.1",
     "ds-runner-slots"},
    {"AStoreBasedBarrierTimeoutIsAConnectionTimeoutAtSetup",
     "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for "
     "key: store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)\n",
     0, "2.2", "R2.1", "first-collective-or-pg-barrier"},
    // Stop 49 round 5: the family row first-collective-or-pg-barrier (set-up never completed).
    {"TheWatchdogOnTheFirstCollectiveWithItsLogPrefixIsASetupTimeout",
     "[E ProcessGroupNCCL.cpp:821] [Rank 1] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=1, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1808940 milliseconds "
     "before timing out.\n",
     0, "2.2", "R2.3", "first-collective-or-pg-barrier"},
    {"DdpsParameterCheckAcrossRanksIsTheFirstCollective",
     "[rank3]:     _verify_param_shape_across_processes(self.process_group, parameters)\n", 0,
     "2.2", "R2.3", "first-collective-or-pg-barrier"},
    {"TorchsRendezvousFrameBuildingTheTcpStoreIsAStoreConnection", "    store = TCPStore(\n", 0,
     "2.2", "R2.3", "tcpstore-stuck"},
    {"AZeroStageWithoutAnOptimizerIsAConfigurationError",
     "AssertionError: zero stage 2 requires an optimizer\n", 0, "3.2", "R3.1",
     "ds-zero-needs-optimizer"},
    {"ACheckpointWhoseArgumentsDifferFromTheRunIsAModelMismatch",
     "AssertionError: padded_vocab_size value from checkpoint (32000) is not equal to the input "
     "argument value (32256).\n",
     0, "3.3", "R3.3", "megatron-args-vs-checkpoint"},
    {"DeepSpeedValuesThatContradictTheTrainerAreAConfigurationError",
     "ValueError: Please correct the following DeepSpeed config values that mismatch "
     "TrainingArguments values:\n"
     "- ds train_micro_batch_size_per_gpu=32 vs hf per_device_train_batch_size=4\n",
     0, "3.2", "R3.1", "hf-ds-config-mismatch"},
    {"AFullTensorWrittenIntoAZero3PartitionedParameterIsALoadingFailure",
     "ValueError: Trying to set a tensor of shape torch.Size([43176, 8192]) in \"weight\" (which "
     "has shape torch.Size([0])), this look incorrect.\n",
     0, "3.1", "R3.2", "hf-set-tensor-into-empty"},
    // Stop 47 (round 2): an OOM raised while ColossalAI's LazyInitContext materialises the model
    // is preparation (3.4), not a training step's OOM; Accelerate's zero3_init_flag is zero.Init.
    {"AnOomWhileLazyInitMaterialisesIsAPreparationMemoryAnomaly",
     "  File \"/opt/conda/lib/python3.10/site-packages/colossalai/lazy/lazy_init.py\", "
     "line 240, in _materialize_data\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB\n",
     3, "3.4", "R3.1", "colossalai-lazy-init-materialize"},
    {"AcceleratesZero3InitFlagIsZeroInit", "zero3_init_flag: true\n", 3, "3.1", "R3.2",
     "zero-init-enabled"},
    // Stop 48: DeepSpeed's engine set-up quoted by its traceback frame, not its call line: the
    // engine's _configure_* methods run inside deepspeed.initialize, preparation (3.2).
    {"AFrameInTheEnginesConfigureStepIsAPreparationConfigError",
     "  File \"/usr/lib/python3/site-packages/deepspeed/runtime/engine.py\", line 1230, in "
     "_configure_optimizer\n",
     3, "3.2", "R3.1", "ds-configure-trace"},
    // Pretrained weights that never arrived, stated in the passive or by the random start.
    {"AModelStatedNotLoadedIsALoadingFailure",
     "The pretrained model was not loaded successfully after boosting with the plugin.\n", 3, "3.1",
     "", "prose-not-loaded"},
    {"TrainingFromRandomInitialisationIsALoadingFailure",
     "The loss starts at 11, as if from randomly initialized parameters.\n", 3, "3.1", "",
     "prose-random-init"},
    {"ASizeMismatchStatedInProseIsALoadingFailure",
     "Loading the pretrained weights into the ZeRO-3 model gives size mismatch errors.\n", 3, "3.1",
     "", "prose-size-mismatch"},
    // Megatron-LM's checkpoint converter: its saver's frame holds "save_checkpoint", which
    // is not a training step's checkpoint save.
    {"TheCheckpointConvertersSaverIsPreparation",
     "  File \"/workspace/Megatron-LM/tools/checkpoint/saver_mcore.py\", line 449, in "
     "save_checkpoint\n",
     3, "3.1", "R3.3", "megatron-checkpoint-converter"},
    // ColossalAI's zero_optim_wrapper (colossalai/zero/wrapper.py) refusing its inputs.
    {"ColossalAisZeroOptimizerWrapperRefusalIsAConfigError",
     "AssertionError: Current ZeRO optimizers only support 'norm_type=2'\n", 3, "3.2", "R3.1",
     "colossalai-zero-wrapper-order"},
    // ds_report's op table: an op neither installed nor compatible cannot be JIT-built.
    // Stop 48 (round 2): NCCL's NVLS buffers are set up inside ncclCommInitRank (CUCHECK's
    // "Cuda failure %d '%s'" from transport/nvls.cc), and an error return through init.cc is a
    // communicator that failed to initialise: set-up (2.1), not a running job's comm error (4.7).
    {"AnNvlsCudaFailureIsACommunicatorSetupFailure",
     "node2:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'\n"
     "node2:242431:242475 [1] NCCL INFO transport/nvls.cc:330 -> 1\n",
     2, "2.1", "R2.3", "nccl-nvls-setup-failure"},
    {"AnErrorReturnThroughNcclsInitIsACommunicatorSetupFailure",
     "h1:7:9 [0] NCCL INFO init.cc:1277 -> 1\n", 2, "2.1", "R2.3", "nccl-init-error-return"},
    // Stop 49 (round 4): init_process_group as distributed_c10d's own traceback frame is set-up;
    // Megatron-LM's Transformer Engine layer-spec helper in a traceback is TE missing (1.2).
    {"AnInitProcessGroupFrameIsASetupFailure",
     "  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", "
     "line 602, in init_process_group\n",
     2, "2.1", "", "init-process-group-trace"},
    {"MegatronsTransformerEngineSpecInATracebackIsAMissingComponent",
     "[rank0]:     transformer_layer_spec = get_gpt_layer_with_transformer_engine_spec(args.num_"
     "experts, args.moe_grouped_gemm)\n",
     1, "1.2", "R1.3", "transformer-engine-spec"},
    {"AnOpNeitherInstalledNorCompatibleIsABuildFailure",
     "fused_adam ............. [NO] ....... [NO]\n", 1, "1.1", "R1.2",
     "ds-report-op-not-installed"},
    // Stop 49 (round 4): preparation told in prose (stage3_prep_reports.yaml). Memory that runs
    // out while the model loads or the data is preprocessed is preparation's (3.4), not a step's.
    {"LoadingThatRunsOutOfMemoryIsPreparationMemory",
     "Loading the 70B checkpoint on every rank runs out of memory before the first step.\n", 3,
     "3.4", "R3.1", "prep-oom-prose"},
    // Its root causes tie at 1.5 (R3.1 from this row, R3.2 from it and preprocess-failure-prose);
    // the learned words break the tie, for R3.2 since stop 55's release: not checked.
    {"PreprocessingKilledByAnOomIsPreparationMemory",
     "Data preprocessing with 64 workers is killed by an OOM on a 256 GB host.\n", 3, "3.4", "",
     "prep-oom-title"},
    {"HostMemoryExhaustedBeforeTrainingIsPreparationMemory",
     "SFT of a 70B model with ZeRO-3 on one node is out of CPU memory before training starts.\n", 3,
     "3.4", "R3.1", "host-oom-prose"},
    // Megatron-LM's tools/checkpoint conversions and tools/preprocess_data.py, told in prose.
    {"AConversionFromHfToMcoreToldInProseIsAPreparationLoad",
     "The job fails when converting Mistral-7B from hf to mcore with a target tensor-parallel "
     "size of 2.\n",
     3, "3.1", "", "checkpoint-conversion-prose"},
    {"DataPreprocessingThatFailsIsAPreparationFailure",
     "Data preprocessing fails when the first document of the input json is empty.\n", 3, "3.1",
     "R3.2", "preprocess-failure-prose"},
    // torch.optim.lr_scheduler refusing DeepSpeed's wrapped optimizer (a config's scheduler), and
    // Colossal-AI's MoE plugin finding no expert parameters: set-up refused (3.2).
    {"ASchedulerGivenAWrappedOptimizerIsAConfigError",
     "TypeError: DeepSpeedZeroOptimizer is not an Optimizer\n", 3, "3.2", "R3.1",
     "scheduler-not-an-optimizer"},
    {"ColossalAisMoePluginWithoutExpertParametersIsAConfigError",
     "ValueError: No parameters found in moe_dp_group, please consider using "
     "HybridParallelPlugin instead\n",
     3, "3.2", "R3.1", "colossalai-moe-no-expert-params"},
    // "Trains as if from randomly initialised weights" in a Chinese report: the load failed.
    {"TrainingFromRandomWeightsToldInChineseIsAFailedLoad",
     "使用gemini插件微调时，loss像是从随机初始化的权重开始训练\n", 3, "3.1", "R3.2",
     "prose-random-init-zh"},
    // A frame of ZeRO's MiCS set-up above an error that names no stage: preparation context.
    // Stop 51: an exception under a set-up frame is an API or configuration error (3.2,
    // preparation-frame-exception), no longer the stage's most common symptom (3.1).
    {"AnErrorRaisedInZeroMicsSetUpIsPreparation",
     "  File \"/usr/lib/python3/dist-packages/deepspeed/runtime/zero/mics.py\", line 396, in "
     "__init__\n"
     "AttributeError: 'Parameter' object has no attribute 'comm'\n",
     3, "3.2", "", "preparation-frame"},
    // The same kind of frame (FSDP's construction) above a CUDA OOM on another line: the model
    // does not fit while it is wrapped (3.4), not a step's OOM (4.2); a context row.
    {"AnOomWhileFsdpWrapsTheModelIsPreparationMemory",
     "  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/fsdp/_init_utils.py\", "
     "line 400, in _init_param_handle_from_module\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 "
     "GiB total capacity)\n",
     3, "3.4", "R3.1", "preparation-frame-oom"},
};

// An op that is not pre-built but compatible is DeepSpeed's normal JIT state, not a build
// failure (stop 48): the op row leaves it to the table's weak context.
TEST(TriageStage1Signatures, AnOpLeftToTheJitIsNotABuildFailure) {
  const auto r = run("transformer_inference .. [NO] ....... [OKAY]\n");
  for (const auto& c : r.symptoms) {
    EXPECT_TRUE(std::none_of(c.evidence.begin(), c.evidence.end(), [](const EvidenceLine& e) {
      return e.signature == "ds-report-op-not-installed";
    })) << c.id;
  }
}

// torch's old matmul text, or a size mismatch stated with a training step and no loading, is a
// step's shape error, not a loading failure.
TEST(TriageStage3Signatures, ASizeMismatchWithoutLoadingIsNotLoading) {
  const auto r =
      run("RuntimeError: size mismatch, m1: [2048 x 5], m2: [10 x 1]\n"
          "Size mismatch in the second backward pass under ZeRO-3.\n");
  for (const auto& c : r.symptoms) {
    EXPECT_TRUE(std::none_of(c.evidence.begin(), c.evidence.end(), [](const EvidenceLine& e) {
      return e.signature == "prose-size-mismatch";
    })) << c.id;
  }
}

class Stage123Signature : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage123Signature, RanksItsSymptomAndRootCauseFirstWithTheLineAsEvidence) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage123Signatures, Stage123Signature, ::testing::ValuesIn(kLines),
                         test::case_name);

// The same watchdog text is a training hang mid-run but a set-up timeout on the first collective.
TEST(TriageStage2Signatures, AWatchdogTimeoutOnTheFirstCollectiveIsASetupTimeoutNotATrainingHang) {
  const std::string first =
      "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
      "OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1808940 milliseconds before timing out.\n";
  const auto t = top_of(first, "first-collective-timeout");
  EXPECT_EQ(t.symptom, "2.2");
  EXPECT_TRUE(t.evidence);
  std::string later = first;
  later.replace(later.find("SeqNum=1,"), 9, "SeqNum=9314,");
  EXPECT_EQ(top_of(later, "c10d-watchdog-timeout").symptom, "4.11");
}

// Stop 48 (round 2): cues.yaml's symptom words for stages 1 and 2 order the inferred stage's
// symptoms: a set-up report about a refused connection is 2.2 before the stage's common 2.1, and
// pip's "could not find a version" brings 1.3 into the three.
TEST(TriageStage2Signatures, AnInferredSetupReportAboutARefusedConnectionRanksConnectionFirst) {
  const auto r =
      run("torchrun --nnodes 2 --nproc_per_node 8 train.py\n"
          "The workers never join: the rendezvous connection is refused and the job fails.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 2);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_EQ(r.symptoms[0].id, "2.2");
  EXPECT_EQ(r.symptoms[1].id, "2.1");
}

TEST(TriageStage1Signatures, AnInstallThatFindsNoVersionKeepsPackageAcquisitionInTheThree) {
  const auto r =
      run("pip install deepspeed\n"
          "The install fails: pip could not find a version of the dependency for this Python.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 1);
  EXPECT_TRUE(std::any_of(r.symptoms.begin(), r.symptoms.end(),
                          [](const Candidate& c) { return c.id == "1.3"; }));
}

// Stop 49 (round 4): host memory that runs out in a training step stays the step's (4.2); only a
// load or preprocessing named on the line makes it preparation's.
TEST(TriageStage3Signatures, HostMemoryRunningOutInAStepStaysATrainingOom) {
  const auto r = run("At step 2000 the CPU runs out of memory with ZeRO offload.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id, "4.2");
}

// Stop 49 (round 4): lines every healthy or other-stage report carries are no set-up or build
// evidence: a script's own init_process_group call, NCCL's Init COMPLETE line, a
// --transformer-impl setting, ds_report's [OKAY] rows. `signature` cites none of `text`'s lines.
bool cited_anywhere(const Result& r, const std::string& signature) {
  return std::any_of(r.symptoms.begin(), r.symptoms.end(), [&](const Candidate& c) {
    return std::any_of(c.evidence.begin(), c.evidence.end(),
                       [&](const EvidenceLine& e) { return e.signature == signature; });
  });
}

TEST(TriageStage2Signatures, AScriptsOwnInitProcessGroupCallIsNoSetupFailure) {
  const auto r =
      run("Loss becomes NaN after 20 steps with DDP when averaging gradients on a side stream.\n"
          "    dist.init_process_group(\"nccl\", rank=rank, world_size=2)\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  EXPECT_FALSE(cited_anywhere(r, "init-process-group-trace"));
}

TEST(TriageStage2Signatures, NcclsInitCompleteLineIsNoSetupFailure) {
  const auto r =
      run("Training got slower after the upgrade: step time 1.9 s instead of 1.2 s.\n"
          "[3] NCCL INFO ncclCommInitRankConfig comm 0x563cb890f420 rank 3 nranks 8 cudaDev 3 "
          "nvmlDev 3 busId b000 commId 0xfa356df9cba89de0 - Init COMPLETE\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  EXPECT_FALSE(cited_anywhere(r, "comm-init-rank-mention"));
  // No table names 2.1; since stop 55's release the learned words of the INFO line make it the
  // third slot's other-stage guess (P 0.00: the last of the ranking), which is not a table's.
  for (const auto& c : r.symptoms) {
    if (c.id == "2.1") EXPECT_NE(c.basis.find("(naive Bayes, tune split)"), std::string::npos);
  }
  EXPECT_NE(r.symptoms.front().id, "2.1");
}

TEST(TriageStage1Signatures, SelectingTransformerEngineIsNoImportFailure) {
  const auto r =
      run("--transformer-impl transformer_engine\n"
          "The loss is NaN from the first iteration.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  EXPECT_FALSE(cited_anywhere(r, "transformer-engine-spec"));
}

TEST(TriageStage1Signatures, OpsLeftToTheJitInDsReportAreNoBuildEvidence) {
  const auto r =
      run("async_io ............... [NO] ....... [OKAY]\n"
          "fused_adam ............. [NO] ....... [OKAY]\n"
          "The run fails.\n");
  EXPECT_FALSE(cited_anywhere(r, "ds-report-table"));
  const auto incompatible = run("async_io ............... [NO] ....... [NO]\n");
  ASSERT_FALSE(incompatible.symptoms.empty());
  EXPECT_EQ(incompatible.symptoms.front().id, "1.1");  // an op that cannot be built still is
}

// DeepSpeed warns about libaio from ds_report and at every start on a host without it: the
// warning alone is context (an inferred answer), not an error text the tables answer from.
TEST(TriageStage1Signatures, DeepSpeedsLibaioWarningIsContextNotAnErrorText) {
  const auto r =
      run(" [WARNING]  async_io requires the dev libaio .so object and headers but these were not "
          "found.\n");
  EXPECT_NE(r.basis, Result::Basis::kTables);
  const auto nan =
      run(" [WARNING]  async_io requires the dev libaio .so object and headers but these were not "
          "found.\n"
          "The loss goes to NaN after a few hundred steps with ZeRO-2.\n");
  ASSERT_FALSE(nan.symptoms.empty());
  EXPECT_EQ(nan.symptoms.front().id, "4.4");
  ASSERT_GE(nan.symptoms.size(), 2u);
  EXPECT_LT(nan.symptoms[1].score, 1.0);  // the warning's 1.1 no longer weighs as an error
}

// `pip` is a stage-1 word only as pip's own texts (pip install, pip._internal, its build
// directories): a report about pipeline parallelism is not pointed at the build stage by it.
TEST(TriageStage1Signatures, PipelineIsNotPip) {
  const auto r =
      run("The build of the fused ops fails after the upgrade.\n"
          "We train with pipeline parallelism.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 1);
  for (const auto& c : r.symptoms) {
    for (const auto& e : c.evidence) {
      EXPECT_FALSE(e.line == 2 && e.signature.find("'pip'") != std::string::npos)
          << c.id << ": " << e.signature;
    }
  }
  const auto install = run("pip install deepspeed fails.\n");
  ASSERT_FALSE(install.symptoms.empty());
  EXPECT_EQ(install.stage, 1);
}

// Stop 47: Megatron-LM's indexed dataset named in its own loading log (megatron/core/datasets/
// indexed_dataset.py prints "Load the _IndexReader from <prefix>.idx") before an error that names
// no stage: the report is about the data the run reads (3.1).
TEST(TriageStage3Signatures, MegatronsIndexedDatasetLogPointsAtDataLoading) {
  const auto r =
      run("INFO:megatron.core.datasets.indexed_dataset:Load the _IndexReader from "
          "/data/gpt2_text_document.idx\n"
          "AttributeError: 'NoneType' object has no attribute 'sizes'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 3);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id, "3.1");
  EXPECT_EQ(r.root_causes.at(0).id, "R3.2");
  const auto& ev = r.symptoms.front().evidence;
  EXPECT_TRUE(std::any_of(ev.begin(), ev.end(), [](const EvidenceLine& e) {
    return e.line == 1 && e.signature == "megatron-indexed-dataset-name";
  }));
}

// `connect` is a stage-2 word only where something connects: a report that the machines are
// "connected" by a switch is not pointed at set-up (nor at 2.2) by it.
TEST(TriageStage2Signatures, ConnectedMachinesAreNoConnectionEvidence) {
  const auto r =
      run("NCCL fails on the second node.\n"
          "The nodes are connected by a switch.\n");
  for (const auto& c : r.symptoms) {
    for (const auto& e : c.evidence) {
      EXPECT_FALSE(e.line == 2 && e.signature.find("'connect'") != std::string::npos)
          << c.id << ": " << e.signature;
    }
  }
  const auto refused = run("torchrun: the workers fail to connect to the master node.\n");
  ASSERT_FALSE(refused.symptoms.empty());
  EXPECT_EQ(refused.stage, 2);
}

// The /dev/shm advice beside a bus error: the crash in training (stage 4) stays first, the advice
// alone leans to the set-up failure it more often follows (stop 57).
TEST(TriageShmAdvice, ABusErrorWithTheShmSizeAdviceStaysAStageFourCrash) {
  const auto bus = run("Bus error (core dumped)\ndocker run --gpus all --shm-size=1g image\n");
  ASSERT_EQ(bus.kind, Result::Kind::kFound);
  ASSERT_FALSE(bus.symptoms.empty());
  EXPECT_EQ(bus.stage, 4);
  EXPECT_TRUE(bus.symptoms[0].id == "4.9" || bus.symptoms[0].id == "4.8") << bus.symptoms[0].id;
}

}  // namespace
}  // namespace fl::triage
