// Stop 50: the stage-5 rows of stage5_inference_sources.yaml, each on the text its framework
// raises or logs (the source file is named in the table's comment). With the tables before stop 50
// each case ranked another stage first, found nothing, or answered 5.x on learned words or another
// row, so the row cited on line 1 (or the root cause it names) tells it apart.
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <sstream>
#include <string>

namespace fl::triage {
namespace {

using test::SignatureCase;
using test::tables;

using test::run;

// {name, text, stage, top symptom, top root cause ("": not checked), the signature cited on
// line 1 as the top symptom's evidence ("": not checked)}.
const SignatureCase kStage5Sources[] = {
    // DeepSpeed deepspeed/inference/engine.py. The first line names "DeepSpeed Inference" beside
    // a RuntimeError, so inference-exception-same-line already reads 5.1; the row names the cause.
    {"DeepSpeedsMaxTokensRefusalIsAMisconfiguredResource",
     "RuntimeError: Input with size 2100 exceeds maximum length of 1024. Please increase "
     "max_tokens in the DeepSpeed Inference Config.\n",
     5, "5.1", "R5.1", ""},
    {"ADtypeTheAcceleratorLacksIsAHardwareMismatch",
     "ValueError: Data type torch.bfloat16 is not supported by cuda accelerator\n", 5, "5.7",
     "R5.3", "ds-inference-dtype-accelerator"},
    {"CudaGraphProfilingOfAGptModelIsRefused",
     "ValueError: Model times are empty and cuda graph is enabled. If this is a GPT-style model "
     "this combo is not supported.\n",
     5, "5.1", "R5.5", "ds-inference-cuda-graph-refusal"},
    {"AnExpertParallelSizeThatDoesNotDivideTheWorldIsRefused",
     "ValueError: Invalid ep_size=4 for world_size=2\n", 5, "5.1", "R5.4", "ds-inference-ep-size"},
    // deepspeed/module_inject/: replace_module.py, containers/bloom.py, containers/base.py,
    // fusedqkv_utils.py, ops/transformer/inference/moe_inference.py and op_binding/workspace.py.
    {"NoInjectionPolicyForTheModelIsAnIncompatibility",
     "AssertionError: No default policy found! Please specify your policy injection_policy (like "
     "{BertLayer:HFBEertLayerPolicy}).\n",
     5, "5.1", "R5.5", ""},
    {"AContainerWithoutMetaCheckpointLoadingIsALoadingIssue",
     "AssertionError: Meta Tensor checkpoint loading not supported in DS_GPTNEOXContainer "
     "container\n",
     5, "5.5", "R5.5", "ds-inject-meta-checkpoint-container"},
    {"BloomInjectionRefusesNewTransformers",
     "RuntimeError: Transformers version 4.44.0 exceeds version 4.43.4! After transformers "
     "version 4.43.4, BLOOM inference with DeepSpeed is no longer supported.\n",
     5, "5.1", "R5.3", "ds-inject-bloom-transformers"},
    {"TritonKernelsOnlyForBertModels",
     "NotImplementedError: Triton kernels are only for BERT-like "
     "models yet\n",
     5, "5.1", "R5.5", "ds-inference-triton-refusal"},
    {"MoeInferenceKernelsRefuseBf16",
     "AssertionError: DeepSpeed MoE Transformer Inference not yet tested for bfloat support\n", 5,
     "5.1", "R5.5", "ds-moe-inference-bf16"},
    {"AutoTpCannotSplitQwensFusedAttention",
     "RuntimeError: AutoTP cannot shard this QWen attention across 8 ranks: rank 7 would receive "
     "an empty query/key/value shard.\n",
     5, "5.1", "R5.4", ""},
    {"TheInferenceWorkspaceNotAllocatedIsMemory", "AssertionError: Could not allocate workspace\n",
     5, "5.2", "R5.1", "ds-inference-workspace-missing"},
    {"ATraceThroughTheInferenceKernelsIsAnExecutionFailure",
     "  File \"/opt/conda/lib/python3.10/site-packages/deepspeed/ops/transformer/inference/"
     "ds_attention.py\", line 168, in forward\n"
     "TypeError: forward() got an unexpected keyword argument 'position_ids'\n",
     5, "5.1", "", "ds-inference-run-frames"},
    {"ATraceThroughTheEnginesForwardIsAnExecutionFailure",
     "  File \"/opt/conda/lib/python3.10/site-packages/deepspeed/inference/engine.py\", line 588, "
     "in forward\n"
     "TypeError: forward() missing 1 required positional argument: 'attention_mask'\n",
     5, "5.1", "", "ds-inference-run-frames"},
    // DeepSpeed FastGen, deepspeed/inference/v2/ (ragged/, engine_factory.py, sharding/,
    // kernels/, model_implementations/).
    {"FastGensKvCacheOutOfBlocksIsMemory",
     "ValueError: Not enough free blocks in the KV-cache to allocate 12 blocks\n", 5, "5.2", "R5.1",
     "fastgen-kv-cache-blocks"},
    {"FastGensRaggedBatchLimitIsAnExecutionFailure",
     "RuntimeError: Ragged batch is full due to capacity limit: 768)\n", 5, "5.1", "R5.1",
     "fastgen-ragged-batch-full"},
    {"FastGenHasNoImplementationForTheModel", "ValueError: Unsupported model type gemma\n", 5,
     "5.1", "R5.5", "fastgen-unsupported-model"},
    {"FastGenCannotSplitGqaHeads",
     "AssertionError: Currently do not support uneven partitioning of KV heads for GQA.\n", 5,
     "5.1", "R5.4", "fastgen-kv-head-sharding"},
    {"FastGensKernelsRefuseTheHeadSize",
     "ValueError: Unsupported head size: 80, supported_head_sizes are [64, 128]\n", 5, "5.1",
     "R5.5", "fastgen-kernel-config"},
    {"FastGensFp6WeightsNeedAmpere",
     "RuntimeError: WF6AF16 quantization is only supported on Ampere architectures\n", 5, "5.7",
     "R5.3", "fastgen-fp6-arch"},
    {"FastGenCannotMapACheckpointParameter",
     "ValueError: Cannot find container for lm_head.weight, please double check the "
     "Containers/ContainerMap\n",
     5, "5.5", "R5.6", "fastgen-checkpoint-map"},
    {"FastGensNonTransformerParametersMissingAfterLoad",
     "RuntimeError: Non-transformer parameters not fully initialized after checkpoint load.\n", 5,
     "5.5", "R5.6", "fastgen-checkpoint-params"},
    {"FastGenKeepsTheKvCacheOnTheGpu",
     "NotImplementedError: Offloading of KV-caches is not yet supported.\n", 5, "5.1", "R5.2",
     "fastgen-kv-offload"},
    {"ATraceThroughFastGenIsAnExecutionFailure",
     "  File \"/usr/local/lib/python3.10/dist-packages/deepspeed/inference/v2/ragged/"
     "sequence_descriptor.py\", line 258, in extend_kv_cache\n"
     "IndexError: index 0 is out of bounds for dimension 0 with size 0\n",
     5, "5.1", "", "fastgen-frames"},
    // DeepSpeed-MII, mii/backend/server.py and mii/modeling, mii/config.py.
    {"MiisServerCrashedWhileStarting",
     "RuntimeError: server crashed for some reason, unable to proceed\n", 5, "5.1", "R5.1",
     "mii-server-crashed"},
    {"MiiTensorParallelWithoutALauncher",
     "AssertionError: Attempting to run with TP > 1 and not using a distributed launcher like "
     "deepspeed or torch.distributed\n",
     5, "5.1", "R5.4", "mii-tp-without-launcher"},
    {"MiisZeroInferenceRefusesMetaTensors",
     "AssertionError: ZeRO-Inference does not support meta tensors.\n", 5, "5.5", "R5.5",
     "mii-zero-inference-meta"},
    // Megatron-LM megatron/core/inference/ (contexts/, sampling/, text_generation_server/,
    // inference_client.py).
    {"MegatronsDynamicContextOverflowIsMemory",
     "megatron.core.inference.contexts.dynamic_context.TokenOverflowError: 17\n", 5, "5.2", "R5.1",
     "mcore-inference-context-overflow"},
    {"MegatronsMambaSlotsRunOut",
     "MambaSlotCapacityError: Mamba cache requires 8 new durable slots, but only 2 free or "
     "evictable slots are available\n",
     5, "5.2", "R5.1", "mcore-inference-mamba-slots"},
    {"MegatronsSamplerRefusesTopKWithTopP",
     "AssertionError: Cannot have top-p and top-k both greater than zero\n", 5, "5.1", "R5.4",
     "mcore-sampling-arguments"},
    {"MegatronsServerRefusesThePrompts", "\"prompts is not a list of strings\"\n", 5, "5.1", "R5.4",
     "mcore-generation-server-prompts"},
    {"MegatronsServerRefusesTheTemperature",
     "temperature must be a positive number less than or equal to 100.0\n", 5, "5.1", "R5.4",
     "mcore-generation-server-arguments"},
    {"MegatronsServerRenamedMaxLen",
     "max_len is no longer used.  Replace with tokens_to_generate\n", 5, "5.1", "R5.4",
     "mcore-generation-server-renamed"},
    {"MegatronsInferenceCoordinatorUnreachable",
     "TimeoutError: Timed out connecting to the Megatron inference coordinator\n", 5, "5.1", "R5.1",
     "mcore-inference-coordinator"},
    // ColossalAI colossalai/inference/ (core/llm_engine.py, kv_cache/).
    {"ColossalAiHasNoInferencePolicyForTheModel",
     "ValueError: Unable to instantiate model policy: 'NoneType' object is not callable\n", 5,
     "5.1", "R5.5", "colossalai-inference-policy"},
    {"ColossalAisKvBlockIsFull", "AssertionError: Block#3 has no available space to allocate.\n", 5,
     "5.2", "R5.1", "colossalai-kv-block-space"},
    {"ColossalAisSpeculativeDecodingTakesOneSequence",
     "AssertionError: Only support bsz 1 for speculative decoding for now.\n", 5, "5.1", "R5.2",
     "colossalai-inference-limits"},
    {"ATraceThroughColossalAisInferenceEngineIsAnExecutionFailure",
     "  File \"/root/ColossalAI/colossalai/inference/core/llm_engine.py\", line 612, in generate\n"
     "KeyError: 'input_ids'\n",
     5, "5.1", "", "colossalai-inference-frames"},
};

class Stage5SourceRow : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage5SourceRow, RanksItsSymptomFirst) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage5SourceRows, Stage5SourceRow,
                         ::testing::ValuesIn(kStage5Sources), test::case_name);

// MII logs "waiting for server to start..." while it waits (context, env) and names the crash
// after it: the answer cites both lines, and the waiting line alone is weak context only.
TEST(TriageStage5SourceRowsMore, MiisWaitingLineIsContextForTheCrash) {
  const auto r =
      run("[2024-01-10 08:44:10,221] [INFO] [server.py:65:_wait_until_server_is_live] waiting for "
          "server to start...\n"
          "RuntimeError: server crashed for some reason, unable to proceed\n");
  test::expect_first(r, 5, "5.1", "mii-server-crashed", 2);
}

// A CUDA error other than an illegal access, with init_inference on another line, is the inference
// execution failure the convention names for the illegal access (stop 49's context row, its list
// extended): 5.1, where the tables before stop 50 answered the training step's 4.3.
TEST(TriageStage5SourceRowsMore, ACudaErrorUnderInitInferenceIsAnExecutionFailure) {
  const auto r =
      run("model = deepspeed.init_inference(model, mp_size=2, dtype=torch.half)\n"
          "RuntimeError: CUDA error: misaligned address\n"
          "CUDA kernel errors might be asynchronously reported at some other API call, so the "
          "stacktrace below might be incorrect.\n");
  test::expect_first(r, 5, "5.1");
}

// cuBLAS status 8 (CUBLAS_STATUS_ARCH_MISMATCH) in DeepSpeed's "kernel execution error" line
// under kernel injection is the GPU's architecture, 5.7; the same line alone (the training
// kernels print it too) stays the training step's 4.3.
TEST(TriageStage5SourceRowsMore, CublasArchMismatchUnderKernelInjectionIsHardware) {
  const auto r =
      run("engine = deepspeed.init_inference(model, replace_with_kernel_inject=True, "
          "dtype=torch.half)\n"
          "!!!! kernel execution error. (m: 2304, n: 10, k: 768, error: 8)\n");
  test::expect_first(r, 5, "5.7");
  ASSERT_FALSE(r.root_causes.empty());
  EXPECT_EQ(r.root_causes[0].id, "R5.3");
  const auto alone = run("!!!! kernel execution error. (m: 2304, n: 10, k: 768, error: 8)\n");
  ASSERT_EQ(alone.kind, Result::Kind::kFound);
  ASSERT_FALSE(alone.symptoms.empty());
  EXPECT_EQ(alone.symptoms[0].id, "4.3");
}

// Stop 51: a Python exception with the inference engine named on another line
// (inference-context-exception) is answered 5.1 by the tables; before, only the learned words
// reached 5.1, weakly.
void expect_inference_context_exception(const std::string& text) {
  const auto r = run(text);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "5.1");
  EXPECT_TRUE(test::top_cites(r, "inference-context-exception", 1));
}

TEST(TriageStage5SourceRowsMore,
     AnAttributeErrorUnderColossalsInferenceEngineIsAnInferenceFailure) {
  expect_inference_context_exception(
      "    engine = InferenceEngine(model, tokenizer, inference_config, verbose=True)\n"
      "AttributeError: 'LlamaForCausalLM' object has no attribute 'model'\n");
}

TEST(TriageStage5SourceRowsMore, ARuntimeErrorUnderZeroInferenceIsAnInferenceFailure) {
  expect_inference_context_exception(
      "Running ZeRO-Inference with the model offloaded to CPU\n"
      "RuntimeError: Expected all parameters to be partitioned before the forward pass\n");
}

// Stop 52: a Megatron-LM InferenceParams error, told in a title line and quoted again, is the
// inference run failing; the tables before stop 52 tied it with 4.3 and ranked 4.3 first.
TEST(TriageStage5SourceRowsMore, AnAttributeErrorOnMegatronsInferenceParamsIsAnInferenceFailure) {
  const auto r =
      run("The server crashes on the first prompt: AttributeError: 'InferenceParams' object has no "
          "attribute 'max_sequence_len'\n"
          "AttributeError: 'InferenceParams' object has no attribute 'max_sequence_len'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "5.1");
  EXPECT_TRUE(test::cites(r.symptoms[0], "inference-context-exception", 2));
}

// Stop 52: the rows and words of the inference stage's round (stage5_*.yaml, cues.yaml). With
// the tables and cues of main at 663457f each case answers another stage or symptom, or nothing;
// the guards answer the same before and after.
const SignatureCase kStage5Stop52[] = {
    {"TheInferenceEnginesExpertGroupsQuotedAsCodeAreInference",
     "        self._create_ep_parallel_group(config.moe.moe_experts)\n", 5, "5.1", "R5.2",
     "ds-inference-engine-code"},
    {"TheInferenceConfigsCudaGraphSwitchedOnIsInference",
     "    \"enable_cuda_graph\": True,\n    \"replace_with_kernel_inject\": True,\n", 5, "5.1",
     "R5.2", "ds-inference-cuda-graph-on"},
    {"MemoryAndInferenceInOneClauseIsAnInferenceMemoryIssue",
     "Model memory required for tensor parallel inference is not reduced on each GPU\n", 5, "5.2",
     "R5.1", "inference-memory-statement"},
    {"AGenerationThatRepeatsNumbersIsAnOutputInconsistency",
     "The converted model only repeats meaningless numbers.\n", 5, "5.3", "",
     "repetition-statement"},
    {"AnInferenceScriptThatCannotLoadTheStateDictsKeysIsALoadingIssue",
     "python inference.py --model_path actor.pt --pretrain bigscience/bloom-560m\n"
     "RuntimeError: Error(s) in loading state_dict for BloomForCausalLM:\n"
     "\tMissing key(s) in state_dict: \"transformer.h.0.input_layernorm.weight\"\n",
     5, "5.5", "R5.6", "inference-script-context-keys"},
};

class Stage5Stop52Row : public ::testing::TestWithParam<SignatureCase> {};

TEST_P(Stage5Stop52Row, RanksItsSymptomFirst) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageStage5Stop52Rows, Stage5Stop52Row,
                         ::testing::ValuesIn(kStage5Stop52), test::case_name);

// A hang stated on one line with inference named on another is the inference hang (5.1, the
// corpus convention); the hang line alone stays the training hang (4.11).
TEST(TriageStage5Stop52, AHangWithInferenceNamedOnAnotherLineIsAnInferenceFailure) {
  const auto r =
      run("The job hangs after the first batch.\n"
          "We run inference with tensor parallel 2 on one node.\n");
  test::expect_first(r, 5, "5.1", "inference-context-hang", 2);
  const auto alone = run("The job hangs after the first batch.\n");
  ASSERT_EQ(alone.kind, Result::Kind::kFound);
  ASSERT_FALSE(alone.symptoms.empty());
  EXPECT_EQ(alone.symptoms[0].id, "4.11");
}

// torch.multinomial's check under a generate call is the generation failing (5.1), not the
// training loss's NaN (4.4, nan-word's reading before stop 52).
TEST(TriageStage5Stop52, AnInfOrNanProbabilityInGenerateIsAnInferenceFailure) {
  const auto r =
      run("outputs = model.generate(input_ids, do_sample=True)\n"
          "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n");
  test::expect_first(r, 5, "5.1", "multinomial-probability-nan", 2);
}

// An illegal memory access under inference stays the execution failure: the memory row does not
// read the CUDA error (guard; 5.1 before and after).
TEST(TriageStage5Stop52, AnIllegalMemoryAccessInInferenceIsNoMemoryIssue) {
  const auto r = run("Illegal memory access with DeepSpeed Inference for RoBERTa-Large\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "5.1");
}

// cues.yaml: ColossalAI's EnergonAI server is an inference word (before: no answer), and a model
// that is not split across the ranks is 5.9's (before: the stage's common 5.1 first).
TEST(TriageStage5Stop52, AnEnergonServiceIsInference) {
  const auto r =
      run("energonai service init --config_file=/config/opt_config.py\n"
          "It does not work when tp_init_size is 4\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
}

// (Since weak_nb_order_min is on, the learned words' sure 5.1 comes first; the 5.9 words keep the
// functional issue among the three.)
TEST(TriageStage5Stop52, AModelNotSplitAcrossTheRanksIsAFunctionalIssue) {
  const auto r =
      run("The engine runs, but the model only runs on one GPU: it is not split across "
          "the four ranks with tp_size=4\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_TRUE(std::any_of(r.symptoms.begin(),
                          r.symptoms.begin() + std::min<size_t>(3, r.symptoms.size()),
                          [](const Candidate& c) { return c.id == "5.9"; }));
}

}  // namespace
}  // namespace fl::triage
