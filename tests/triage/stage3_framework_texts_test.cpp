// faultline triage's stage-3 rows written from the frameworks' own preparation texts
// (harness/triage/signatures/stage3_framework_texts.yaml, stop 50): each case is a line the code
// prints while a checkpoint is converted or loaded, a dataset or tokenizer is built, or a
// parallel layout or plugin is set up, copied from the source file the row's comment names, with
// the traceback line a report usually quotes above it. The row must rank its symptom and root
// cause first; without it the same input was answered otherwise (checked when the rows were
// written). Stop 51 adds an exception under a preparation frame.
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

// Line 1 is the framework's text; the signature is checked as the top symptom's evidence there.
const SignatureCase kTexts[] = {
    // Megatron-LM tools/checkpoint (convert.py, loader_base.py, saver_base.py).
    {"AConverterWhoseSourceCheckpointLacksAnArgumentRejectsIt",
     "Checkpoint does not specify argument num_query_groups. Exiting.\n", 3, "3.2", "R3.3",
     "megatron-converter-arg-missing"},
    {"AConverterSaverThatReceivesTheWrongMessageFailsTheLoad",
     "Unexpected message. Expecting \"embeddings\" but got \"transformer layer 0\". Exiting "
     "saver.\n",
     3, "3.1", "R3.3", "megatron-converter-queue-message"},
    {"AConverterWhoseVocabSizesDisagreeIsAModelMismatch",
     "Both --true-vocab-size and --vocab-file specified but vocab sizes do not match. Aborting.\n",
     3, "3.3", "R3.2", "megatron-converter-vocab-mismatch"},
    {"AConverterSendingAPartTheTargetModelLacksIsAModelMismatch",
     "ERROR: got an output layer, but model does not have one\n", 3, "3.3", "R3.3",
     "megatron-converter-model-part"},
    {"AConverterPluginThatDoesNotExistIsAnArgumentError",
     "Unable to load loader plugin llama_mistral. Exiting.\n", 3, "3.2", "R3.1",
     "megatron-converter-plugin"},
    // torch's DistributedDataParallel constructor (torch/nn/parallel/distributed.py) refusing the
    // module it wraps (stage3_data_model_prep.yaml).
    {"DdpOverAModuleWithNothingToTrainIsAnApiError",
     "RuntimeError: DistributedDataParallel is not needed when a module doesn't have any parameter "
     "that requires a gradient.\n",
     3, "3.2", "R3.1", "ddp-constructor-refused"},
    {"DdpDeviceIdsForAModuleOnTheCpuIsAnApiError",
     "ValueError: DistributedDataParallel device_ids and output_device arguments only work with "
     "single-device/multiple-device GPU modules or CPU modules, but got device_ids [1], "
     "output_device None, and module parameters {device(type='cpu')}.\n",
     3, "3.2", "R3.1", "ddp-constructor-refused"},
    // torch's load_state_dict size mismatch quoted without its "size mismatch for NAME:" head
    // (stop 82): read as the whole text is, a load into a model of other shapes.
    {"AParamCopiedFromACheckpointOfOtherShapeIsALoadingFailure",
     "copying a param with shape torch.Size([768]) from checkpoint, the shape in current model is "
     "torch.Size([64]).\n",
     3, "3.1", "R3.3", "copying-param-shape"},
    // Checks an engine runs while it is built (stop 82): DeepSpeed's batch rule as quoted, its
    // pipeline engine's ZeRO-stage assertion (with the reporter's "pipline"), its bf16 check
    // against the ZeRO stage, Colossal-AI's ZeroOptimizer over a model not wrapped in ZeroDDP.
    {"DeepSpeedsBatchFormulaIsAConfigurationError",
     "train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_step * "
     "world_size\n",
     3, "3.2", "R3.1", "ds-batch-formula"},
    {"ZeroTwoUnderThePipelineEngineIsAConfigurationError",
     "AssertionError: ZeRO-2 and ZeRO-3 are incompatible with pipline parallelism\n", 3, "3.2",
     "R3.1", "ds-pipeline-zero-stage"},
    {"Bf16WithoutZeroIsAConfigurationError",
     "AssertionError: bfloat16 mode is only enabled for Zero 1,2,3 currently. got 0\n", 3, "3.2",
     "R3.4", "ds-bf16-zero-stage"},
    {"AZeroOptimizerOverAnUnwrappedModelIsAConfigurationError",
     "---> 61     assert isinstance(module, ZeroDDP)\nAssertionError: \n", 3, "3.2", "R3.1",
     "colossal-zero-optimizer-needs-zeroddp"},
    // Megatron-LM megatron/training/checkpointing.py.
    {"ADistributedCheckpointLoadedWithoutItsFlagsIsAnArgumentError",
     "RuntimeError: Detected load from a distributed checkpoint, but neither --use-dist-ckpt nor "
     "--auto-detect-ckpt-format is set.\n",
     3, "3.2", "R3.1", "megatron-dist-ckpt-flags"},
    {"AModelOnlyCheckpointLoadedWithoutFinetuneIsALoadingFailure",
     "Unable to load optimizer from checkpoint /ckpt/llama2-7b-tp2/release/mp_rank_00/"
     "model_optim_rng.pt. Specify --no-load-optim or --finetune to prevent attempting to load the "
     "optimizer state, exiting ...\n",
     3, "3.1", "R3.1", "megatron-load-optim-rng"},
    // Megatron-LM megatron/core/dist_checkpointing (validation.py, strategies/torch.py).
    {"ATorchDistCheckpointWithOtherKeysIsALoadingFailure",
     "megatron.core.dist_checkpointing.core.CheckpointingException: Some keys found in the "
     "checkpoint are missing in the provided sharded state dict. \n",
     3, "3.1", "R3.3", "megatron-dist-ckpt-keys"},
    {"ATorchDistCheckpointWithOtherGlobalShapesIsALoadingFailure",
     "megatron.core.dist_checkpointing.core.CheckpointingException: Global shape mismatch for "
     "loaded (torch.Size([128256, 4096])) and expected ((128000, 4096)) tensor for key "
     "embedding.word_embeddings.weight\n",
     3, "3.1", "R3.3", "megatron-dist-ckpt-shape"},
    // Megatron-LM datasets and tokenizer.
    {"AMissingIdxBinPairIsADataLoadingFailure",
     "AssertionError: One or both of the .idx and .bin files cannot be found at the path prefix "
     "/data/pile/pile_00\n",
     3, "3.1", "R3.2", "megatron-idx-bin-not-found"},
    {"AnUnwritableDatasetCacheIsADataLoadingFailure",
     "Exception: Failed to write dataset materials to the data cache directory. Please supply a "
     "directory to which you have write access via the path_to_cache attribute\n",
     3, "3.1", "R3.2", "megatron-dataset-cache-write"},
    {"AnUnknownTokenizerTypeIsAnArgumentError",
     "ValueError: tokenizer_type Llama3Tokenizer is not supported. See list of available "
     "tokenizers: ['BertWordPieceLowerCase', 'GPT2BPETokenizer']\n",
     3, "3.2", "R3.1", "megatron-tokenizer-type"},
    {"HeadsThatDoNotSplitOverTensorParallelismAreALayoutError",
     "ValueError: num_attention_heads (12) must be a multiple of tensor_model_parallel_size (8).\n",
     3, "3.2", "R3.1", "megatron-heads-tp-multiple"},
    // DeepSpeed (runtime/pipe/module.py, runtime/engine.py).
    {"PipelineStagesThatDoNotDivideTheWorldAreALayoutError",
     "RuntimeError: num_stages (3) must divide distributed world size (8)\n", 3, "3.2", "R3.1",
     "ds-pipe-stages-world"},
    {"AClientOptimizerUnderZeroOffloadIsAConfigurationError",
     "deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client "
     "provided optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases will yield poor "
     "performance.\n",
     3, "3.2", "R3.1", "ds-engine-optimizer-check"},
    {"ZeroInitOnNvmeWithoutAnNvmePathIsAConfigurationError",
     "AssertionError: \"nvme_path\" in DeepSpeed Config cannot be None if remote device is nvme\n",
     3, "3.2", "R3.1", "ds-zero-init-remote-device"},
    // Colossal-AI (shardformer/policies/auto_policy.py, booster/plugin/hybrid_parallel_plugin.py,
    // checkpoint_io/utils.py).
    {"AModelShardFormerHasNoPolicyForIsAnUnsupportedModel",
     "NotImplementedError: Auto policy for InternLM2ForCausalLM "
     "(transformers_modules.internlm2.InternLM2ForCausalLM) is not implemented\n",
     3, "3.2", "R3.4", "colossalai-no-shard-policy"},
    {"AHybridPluginWithoutMicrobatchesIsAConfigurationError",
     "AssertionError: num_microbatches or microbatch_size must be specified when using pipeline "
     "parallelism\n",
     3, "3.2", "R3.1", "colossalai-hybrid-plugin-args"},
    {"ACheckpointPathThatIsNeitherFileNorFolderIsALoadingFailure",
     "RuntimeError: Invalid checkpoint path /models/llama-7b. Expected a file or a directory.\n", 3,
     "3.1", "R3.2", "colossalai-checkpoint-path"},
    // PyTorch (nn/modules/module.py, serialization.py, distributed/checkpoint, FSDP).
    {"ACheckpointTensorThatCannotBeCopiedIsALoadingFailure",
     "While copying the parameter named \"lm_head.weight\", whose dimensions in the model are "
     "torch.Size([32000, 4096]) and whose dimensions in the checkpoint are torch.Size([32001, "
     "4096]), an exception occurred : ('Inplace update',).\n",
     3, "3.1", "R3.3", "torch-copy-parameter-failed"},
    {"ACheckpointForADeviceThisHostLacksIsALoadingFailure",
     "RuntimeError: Attempting to deserialize object on CUDA device 3 but "
     "torch.cuda.device_count() is 1. Please use torch.load with map_location to map your "
     "storages to an existing device.\n",
     3, "3.1", "R3.1", "torch-load-device-missing"},
    {"ADcpLoadMissingAModelKeyIsALoadingFailure",
     "RuntimeError: Missing key in checkpoint state_dict: "
     "model.layers.0.self_attn.q_proj.weight.\n",
     3, "3.1", "R3.3", "dcp-missing-model-key"},
    {"FsdpFlatteningPartlyFrozenParametersIsAConfigurationError",
     "ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`\n",
     3, "3.2", "R3.1", "fsdp-uniform-requires-grad"},
    {"FsdpSyncingStatesOfACpuModuleIsAConfigurationError",
     "ValueError: The module has CPU parameters or buffers when `sync_module_states=True`, which "
     "requires them to be on GPU. Please specify the `device_id` argument or move the module to "
     "GPU before passing it to FSDP.\n",
     3, "3.2", "R3.1", "fsdp-sync-states-on-cpu"},
    {"FsdpWithAnotherDeviceIdThanTheCurrentDeviceIsAConfigurationError",
     "ValueError: Inconsistent compute device and `device_id` on rank 1: cuda:0 vs cuda:1\n", 3,
     "3.2", "R3.1", "fsdp-device-id-inconsistent"},
    // transformers (models/auto/configuration_auto.py, tokenization_auto.py).
    {"AModelTypeTransformersDoesNotKnowIsAnIncompatibleLoad",
     "ValueError: The checkpoint you are trying to load has model type `qwen2` but Transformers "
     "does not recognize this architecture.\n",
     3, "3.1", "R3.4", "hf-unknown-model-type"},
    {"AnUnknownTokenizerClassIsAnIncompatibleLoad",
     "ValueError: Tokenizer class QWenTokenizer does not exist or is not currently imported.\n", 3,
     "3.1", "R3.4", "hf-tokenizer-class-unknown"},
    // stage3_data_model_prep.yaml's converter row on Megatron-LM's older converter path.
    {"TheOlderConverterScriptsFrameIsAConversion",
     "  File \"/workspace/Megatron-LM/tools/checkpoint_util.py\", line 149, in main\n", 3, "3.1",
     "R3.3", "megatron-checkpoint-converter"},
    // Stop 52: torch's FlatParameter text as torch 2.x prints it, in backticks (the row read only
    // the text without them before).
    {"FsdpFlatteningPartlyFrozenParametersInBackticksIsAConfigurationError",
     "ValueError: `FlatParameter` requires uniform `requires_grad`\n", 3, "3.2", "R3.1",
     "fsdp-uniform-requires-grad"},
    // Stop 52 (stage3_prep_sources.yaml): DeepSpeed's config reader, PyTorch's
    // DistributedSampler, DeepSpeed's tensor_fragment mapping, Colossal-AI's init context.
    {"ADeepSpeedConfigPathThatDoesNotExistIsAConfigurationError",
     "ValueError: Expected a string path to an existing deepspeed config, or a dictionary or a "
     "valid base64. Received: configs/ds_zero3.json\n",
     3, "3.2", "R3.2", "ds-config-path-not-found"},
    {"ASamplerRankOutsideItsReplicasIsAConfigurationError",
     "ValueError: Invalid rank 8, rank should be in the interval [0, 7]\n", 3, "3.2", "R3.1",
     "torch-sampler-invalid-rank"},
    {"AnEmptyFragmentOfAZeroPartitionIsAPreparationRuntimeError",
     "AssertionError: fragment start 4096 should be < fragment_end 4096\n", 3, "3.5", "R3.3",
     "ds-hp-fragment-empty"},
    {"AClassImportedInsideAnInitContextIsAnApiError",
     "AttributeError: _old_init is not found in the LlamaAttention, please make sure that you have "
     "imported LlamaAttention before entering the context.\n",
     3, "3.2", "R3.1", "colossalai-init-ctx-old-init"},
};

class Stage3FrameworkText : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage3FrameworkText, RanksItsSymptomAndRootCauseFirstWithTheLineAsEvidence) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage3FrameworkTexts, Stage3FrameworkText,
                         ::testing::ValuesIn(kTexts), test::case_name);

// A DCP load that misses an optimizer key is a resume's (4.10, the stage-4 tables), not a
// pretrained load: the model-key row leaves it alone.
TEST(TriageStage3FrameworkTexts, ADcpLoadMissingAnOptimizerKeyIsNotReadAsAModelLoad) {
  const auto r =
      run("RuntimeError: Missing key in checkpoint state_dict: "
          "optimizer.state.model.layers.0.mlp.weight.exp_avg.\n");
  for (const auto& c : r.symptoms) {
    EXPECT_TRUE(std::none_of(c.evidence.begin(), c.evidence.end(), [](const EvidenceLine& e) {
      return e.signature == "dcp-missing-model-key";
    })) << c.id;
  }
}

// Stop 51: a Python exception under a frame of the code that sets a run up
// (stage3_prep_reports.yaml, preparation-frame-exception) is an API or configuration error of
// preparation, answered by the tables; before, the exception row alone read 4.3, or the stage-3
// words gave a weak answer.
struct FrameCase {
  const char* name;
  const char* text;
  size_t frame_line;  // the preparation frame, cited in the top symptom's evidence
  const char* frame_row = "preparation-frame";  // the row that cites it (the first to match)
};

const FrameCase kFrames[] = {
    {"AnAttributeErrorWhileMicsSetsUpIsAConfigurationError",
     "Traceback (most recent call last):\n"
     "  File \"/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/mics.py\", line "
     "396, in __init__\n"
     "    self.dp_process_group = first_param.comm.param_shard_group\n"
     "AttributeError: 'Parameter' object has no attribute 'comm'\n",
     2},
    {"ARuntimeErrorInAColossalPluginConstructorIsAConfigurationError",
     "Traceback (most recent call last):\n"
     "  File \"/usr/local/lib/python3.10/dist-packages/colossalai/booster/plugin/"
     "hybrid_parallel_plugin.py\", line 1104, in __init__\n"
     "    self.stage_manager = PipelineStageManager(self.pg_mesh, pipeline_axis=self.pp_axis)\n"
     "RuntimeError: Expected a non-empty process group for the pipeline axis\n",
     2},
    {"AnAttributeErrorInTheFsdpConstructorIsAConfigurationError",
     "  File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp/"
     "fully_sharded_data_parallel.py\", line 463, in __init__\n"
     "    _init_param_handle_from_module(\n"
     "AttributeError: 'NoneType' object has no attribute 'device'\n",
     1},
    {"AnAssertionInMegatronsCheckpointArgumentCheckIsAConfigurationError",
     "  File \"/workspace/Megatron-LM/megatron/training/checkpointing.py\", line 804, in "
     "check_checkpoint_args\n"
     "    _compare('add_position_embedding', default=True)\n"
     "    assert checkpoint_value == args_value, error_message\n"
     "AssertionError\n",
     1},
    {"ARuntimeErrorInTheCheckpointConvertersSaverIsAConfigurationError",
     "  File \"/workspace/Megatron-LM/tools/checkpoint/saver_mcore.py\", line 241, in "
     "save_checkpoint\n"
     "    validate_args(margs)\n"
     "RuntimeError: --fp8-format requires Transformer Engine\n",
     1, "megatron-checkpoint-converter"},
};

void PrintTo(const FrameCase& c, std::ostream* os) {
  *os << c.name;
}

std::string frame_case_name(const ::testing::TestParamInfo<FrameCase>& p) {
  return p.param.name;
}

class PreparationFrameException : public ::testing::TestWithParam<FrameCase> {};

TEST_P(PreparationFrameException, IsAnsweredByTheTablesAsAConfigurationError) {
  const auto r = run(GetParam().text);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 3);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id, "3.2");
  EXPECT_TRUE(test::top_cites(r, GetParam().frame_row, GetParam().frame_line));
}

INSTANTIATE_TEST_SUITE_P(TriageStage3FrameworkTexts, PreparationFrameException,
                         ::testing::ValuesIn(kFrames), frame_case_name);

// The same exception under a training frame (the engine's backward) stays stage 4's.
TEST(TriageStage3FrameworkTexts, AnAttributeErrorInTheEnginesBackwardStaysATrainingError) {
  const auto r =
      run("Traceback (most recent call last):\n"
          "  File \"/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py\", line "
          "1990, in backward\n"
          "    self.optimizer.backward(loss)\n"
          "AttributeError: 'Parameter' object has no attribute 'ds_grad_is_ready'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
}

// Stop 52: preparation named by its calls (cues.yaml `stages:` 3): an exception under a
// tensor-parallel, sampler or FSDP-with-mesh set-up that no table row reads is inferred to be
// stage 3's; before stop 52's words these were answered as stage 1, 5 and 4.
struct PrepWordsCase {
  const char* name;
  const char* text;
};

const PrepWordsCase kPrepWords[] = {
    {"AnErrorUnderParallelizeModuleIsPreparation",
     "  File \"/workspace/train_tp.py\", line 52, in main\n"
     "    model = parallelize_module(model, device_mesh, tp_plan)\n"
     "  File \"/usr/lib/python3/dist-packages/torch/distributed/tensor/parallel/api.py\", line "
     "112, in parallelize_module\n"
     "    parallelize_plan.apply(module, device_mesh)\n"
     "KeyError: 'attn'\n"},
    {"AnErrorBuildingADistributedSamplerIsPreparation",
     "  File \"/workspace/train.py\", line 88, in main\n"
     "    sampler = DistributedSampler(train_set, num_replicas=args.world_size, rank=args.rank)\n"
     "TypeError: object of type 'generator' has no len()\n"},
    {"AnErrorWrappingFsdpOnADeviceMeshIsPreparation",
     "  File \"/workspace/train_fsdp.py\", line 70, in main\n"
     "    model = FSDP(model, device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD)\n"
     "IndexError: list index out of range\n"},
};

void PrintTo(const PrepWordsCase& c, std::ostream* os) {
  *os << c.name;
}

std::string prep_words_name(const ::testing::TestParamInfo<PrepWordsCase>& p) {
  return p.param.name;
}

class PreparationWords : public ::testing::TestWithParam<PrepWordsCase> {};

TEST_P(PreparationWords, InferStagePreparation) {
  const auto r = run(GetParam().text);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 3);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id.substr(0, 2), "3.");
}

INSTANTIATE_TEST_SUITE_P(TriageStage3FrameworkTexts, PreparationWords,
                         ::testing::ValuesIn(kPrepWords), prep_words_name);

}  // namespace
}  // namespace fl::triage
