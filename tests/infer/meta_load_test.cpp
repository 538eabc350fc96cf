// A model built on the meta device (workloads/infer/meta_load.hpp): which modules DeepSpeed's
// loaders fill by version and sharding mode, and where a module left on meta fails its first copy
// (deepspeedai/DeepSpeed#2856, #4447; pull requests 2875, 3102, 4147, 4692).
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "workloads/infer/meta_load.hpp"

namespace fl::infer {
namespace {

InjectionChoice choice(const std::string& mode, const std::string& model_class, int tp,
                       const std::string& version) {
  InjectionChoice c;
  c.mode = mode;
  c.model_class = model_class;
  c.tp = tp;
  c.deepspeed_version = version;
  return c;
}

// The error the load or the move raises ("" : none).
template <class E>
std::string error_of(const InjectionChoice& c, const std::string& type,
                     const std::string& parallelization = "pp") {
  try {
    move_meta_model(load_meta_model(c, 2, {type, parallelization}));
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kMetaCopy = "NotImplementedError: Cannot copy out of meta tensor; no data!";

TEST(MetaLoad, WithoutInitInferenceNothingLoadsAndThePipelinesCudaFails) {
  const auto m = load_meta_model(choice("megatron", "opt", 1, "0.8.1"), 2, {"BLOOM", "pp"});
  // Every module that holds parameters: embeddings, 2 x (4 + 2 + 2 Linears and norms), final
  // norm, head.
  EXPECT_EQ(m.left.size(), 2u + 2u * 8u + 1u + 1u);
  EXPECT_EQ(m.left.front(), "model.decoder.embed_tokens (Embedding)");
  const std::string e = error_of<CheckpointError>(choice("megatron", "opt", 1, "0.8.1"), "BLOOM");
  EXPECT_NE(e.find(kMetaCopy), std::string::npos) << e;
  EXPECT_NE(e.find("model.cuda()"), std::string::npos) << e;
}

TEST(MetaLoad, KernelInjectionLoadsEveryModuleOfAMetaContainer) {
  for (const char* cls : {"bloom", "opt", "gpt_neox"}) {
    const auto m = load_meta_model(choice("kernel", cls, 2, "0.8.2"), 2, {"BLOOM", "pp"});
    EXPECT_TRUE(m.left.empty()) << cls;
    EXPECT_NE(move_meta_model(m).find("loaded every module"), std::string::npos) << cls;
  }
  // Before 0.7.7 only BLOOM's loader read a meta model; LLaMA's container gained it in 0.11.0.
  EXPECT_TRUE(
      load_meta_model(choice("kernel", "bloom", 2, "0.7.6"), 2, {"BLOOM", "pp"}).left.empty());
  EXPECT_TRUE(
      load_meta_model(choice("kernel", "llama", 2, "0.11.0"), 2, {"BLOOM", "pp"}).left.empty());
}

TEST(MetaLoad, DeepSpeed081CallsLoadParamsOnThePolicyForAPpDescription) {
  EXPECT_EQ(
      error_of<CheckpointError>(choice("kernel", "opt", 2, "0.8.1"), "BLOOM")
          .rfind("AttributeError: 'HFOPTLayerPolicy' object has no attribute 'load_params'", 0),
      0u);
  EXPECT_NE(error_of<CheckpointError>(choice("kernel", "bloom", 2, "0.8.1"), "BLOOM")
                .find("'BLOOMLayerPolicy' object has no attribute 'load_params'"),
            std::string::npos);
  // A pre-sharded description ('parallelization: tp') takes the branch that reads each
  // parameter itself; 0.8.2 (pull request 2875) calls the container's load_params.
  EXPECT_EQ(error_of<CheckpointError>(choice("kernel", "opt", 2, "0.8.1"), "BLOOM", "tp"), "");
  EXPECT_EQ(error_of<CheckpointError>(choice("kernel", "opt", 2, "0.8.2"), "BLOOM"), "");
}

TEST(MetaLoad, AContainerWithoutMetaSupportAssertsOrCopiesTheMetaLayer) {
  // deepspeedai/DeepSpeed#4447: LLaMA-2 with kernel injection on DeepSpeed 0.10.3; the check
  // ran from 0.9.3 (pull request 2940) until 0.11.0 commented its call out (pull request 4313).
  EXPECT_EQ(
      error_of<CheckpointError>(choice("kernel", "llama", 1, "0.10.3"), "BLOOM")
          .rfind("AssertionError: Meta tensors are not supported for this model currently.", 0),
      0u);
  EXPECT_EQ(error_of<CheckpointError>(choice("kernel", "gpt2", 2, "0.9.3"), "BLOOM")
                .rfind("AssertionError: Meta tensors are not supported", 0),
            0u);
  // Outside those releases the container copies the meta layer's weights, before the
  // checkpoint's own assertion (ckpt_load_enabled) is reached; the newest behaviour too.
  for (const char* v : {"0.9.0", "0.11.0", ""}) {
    const std::string e = error_of<CheckpointError>(choice("kernel", "gpt2", 2, v), "BLOOM");
    EXPECT_EQ(e.rfind(kMetaCopy, 0), 0u) << v << ": " << e;
    EXPECT_NE(e.find("DS_GPT2Container copying the meta layer's weights"), std::string::npos) << e;
  }
  // Before 0.8.1 only BLOOM's, OPT's and GPT-NeoX's meta loading is modelled; OPT's came in 0.7.7.
  EXPECT_NE(error_of<ConfigError>(choice("kernel", "gpt2", 2, "0.8.0"), "BLOOM").find("modelled"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(choice("kernel", "opt", 2, "0.7.6"), "BLOOM").find("modelled"),
            std::string::npos);
}

TEST(MetaLoad, AMetaContainerWithoutACheckpointLeavesItsLayersEmptyAndTheRestOnMeta) {
  const auto m = load_meta_model(choice("kernel", "opt", 2, "0.10.0"), 2, {"", "pp"});
  EXPECT_EQ(m.uninitialized.size(), 2u * 8u);  // the decoder layers' modules
  EXPECT_EQ(m.left.size(), 4u);                // embeddings, final norm, head
  const std::string e = error_of<CheckpointError>(choice("kernel", "opt", 2, "0.10.0"), "");
  EXPECT_NE(e.find("module.to(device)"), std::string::npos) << e;
  // From 0.12.6 the meta embedding sends the model to to_empty: no error.
  EXPECT_TRUE(load_meta_model(choice("kernel", "opt", 2, "0.12.6"), 2, {"", "pp"}).to_empty);
}

TEST(MetaLoad, AutoTpBefore0102LeavesLlamasRmsNormsOnMeta) {
  const auto m = load_meta_model(choice("autotp", "llama", 2, "0.10.1"), 2, {"BLOOM", "pp"});
  ASSERT_EQ(m.left.size(), 5u) << ::testing::PrintToString(
      m.left);  // two per layer, the final norm
  EXPECT_EQ(m.left.front(), "model.layers.0.input_layernorm (LlamaRMSNorm)");
  EXPECT_EQ(m.left.back(), "model.norm (LlamaRMSNorm)");
  const std::string e = error_of<CheckpointError>(choice("autotp", "llama", 2, "0.10.1"), "BLOOM");
  EXPECT_EQ(e.rfind(kMetaCopy, 0), 0u) << e;
  EXPECT_NE(e.find("module.to(device)"), std::string::npos) << e;
  EXPECT_NE(e.find("5 modules are still on the meta device"), std::string::npos) << e;
  // Pull request 4147 (0.10.2) added LlamaRMSNorm to the classes the loader reads.
  EXPECT_EQ(error_of<CheckpointError>(choice("autotp", "llama", 2, "0.10.2"), "BLOOM"), "");
  // The same from an injection_policy (it runs at tp 1 too); OPT's modules are all read.
  auto policy = choice("policy", "llama", 1, "0.10.1");
  policy.policy = {"self_attn.o_proj", "mlp.down_proj"};
  EXPECT_EQ(load_meta_model(policy, 2, {"BLOOM", "pp"}).left.size(), 5u);
  EXPECT_TRUE(
      load_meta_model(choice("autotp", "opt", 2, "0.9.3"), 2, {"BLOOM", "pp"}).left.empty());
}

TEST(MetaLoad, NoLoaderBefore093OrAtTp1) {
  // Before 0.9.3 kernel injection off loads nothing into a meta model (AutoTP slices first).
  const auto m = load_meta_model(choice("autotp", "opt", 2, "0.9.2"), 2, {"", "pp"});
  EXPECT_EQ(m.left.size(), 20u);
  EXPECT_NE(m.copy_site.find("AutoTP's slicing"), std::string::npos);
  // From 0.9.3 AutoTP does not run at tp 1, and nothing else reads the checkpoint.
  EXPECT_EQ(load_meta_model(choice("autotp", "opt", 1, "0.10.3"), 2, {"BLOOM", "pp"}).left.size(),
            20u);
  // A description type whose loader is not the meta one is not modelled.
  EXPECT_NE(
      error_of<ConfigError>(choice("autotp", "opt", 2, "0.10.3"), "Megatron").find("not modelled"),
      std::string::npos);
}

TEST(MetaLoad, From0126AMetaFirstParameterMeansToEmptyAndNoError) {
  // Nothing loaded, first parameter on meta: to_empty gives uninitialized memory silently.
  const auto m = load_meta_model(choice("autotp", "opt", 1, "0.12.6"), 2, {"BLOOM", "pp"});
  EXPECT_TRUE(m.to_empty);
  EXPECT_NE(move_meta_model(m).find("uninitialized"), std::string::npos);
  EXPECT_FALSE(load_meta_model(choice("autotp", "opt", 1, "0.12.5"), 2, {"BLOOM", "pp"}).to_empty);
  // GPT-2's Conv1D layers, which the loader does not read: its slicing fails on them before
  // 0.12.6 and gives them empty memory from 0.12.6 (auto_tp.move), the rest loaded: serving a
  // partly uninitialized model is not modelled.
  auto gpt2 = choice("policy", "gpt2", 2, "0.12.5");
  gpt2.policy = {"attn.c_proj", "mlp.c_proj"};
  const std::string sliced = error_of<CheckpointError>(gpt2, "BLOOM");
  EXPECT_NE(sliced.find("injection_policy's slicing"), std::string::npos) << sliced;
  EXPECT_NE(sliced.find("transformer.h.0.attn.c_attn (Conv1D)"), std::string::npos) << sliced;
  gpt2.deepspeed_version = "0.12.6";
  const auto g = load_meta_model(gpt2, 2, {"BLOOM", "pp"});
  EXPECT_FALSE(g.to_empty);
  EXPECT_TRUE(g.left.empty());
  EXPECT_EQ(g.uninitialized.size(), 8u);
  EXPECT_THROW(move_meta_model(g), ConfigError);
  // Megatron's GPTModel has no HF `device`: the engine always calls module.to.
  auto mg = choice("policy", "megatron_gpt", 2, "0.12.6");
  mg.policy = {"self_attention.dense", "mlp.dense_4h_to_h"};
  const auto mm = load_meta_model(mg, 2, {"BLOOM", "pp"});
  EXPECT_FALSE(mm.to_empty);
  EXPECT_EQ(mm.left.front(), "language_model.embedding.word_embeddings (VocabParallelEmbedding)");
}

TEST(MetaLoad, WrappedKeysMeetTheLoadersDroppedWrapperUntilTheFixes) {
  auto keys_error = [](const char* cls, const char* version, const char* parallelization,
                       bool wrapped) {
    MetaCheckpoint ckpt{"BLOOM", parallelization, wrapped};
    try {
      move_meta_model(load_meta_model(choice("kernel", cls, 2, version), 2, ckpt));
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Pull request 2990 (0.8.3): facebook/opt-125m's keys start with 'model.'.
  EXPECT_EQ(
      keys_error("opt", "0.8.2", "pp", true).rfind("KeyError: 'decoder.embed_tokens.weight'", 0),
      0u);
  EXPECT_EQ(keys_error("opt", "0.8.3", "pp", true), "");
  EXPECT_EQ(keys_error("opt", "0.8.2", "pp", false), "");  // opt-350m's 'decoder.' keys
  EXPECT_EQ(keys_error("opt", "0.8.2", "tp", true), "");   // a pre-sharded description
  // Pull request 3885 (0.10.0): BLOOM fine-tunes' keys start with 'transformer.'.
  EXPECT_EQ(keys_error("bloom", "0.9.5", "pp", true).rfind("KeyError: 'word_embeddings.weight'", 0),
            0u);
  EXPECT_EQ(keys_error("bloom", "0.10.0", "pp", true), "");
  // The two fixes are separate: 0.8.3 keeps BLOOM's wrapper dropped.
  EXPECT_EQ(keys_error("bloom", "0.8.3", "pp", true).rfind("KeyError: 'word_embeddings.weight'", 0),
            0u);
  // 0.8.1 drops the name as well, and the embedding comes before a layer's load_params.
  EXPECT_EQ(
      keys_error("opt", "0.8.1", "pp", true).rfind("KeyError: 'decoder.embed_tokens.weight'", 0),
      0u);
  EXPECT_EQ(
      keys_error("opt", "0.7.7", "pp", true).rfind("KeyError: 'decoder.embed_tokens.weight'", 0),
      0u);
}

}  // namespace
}  // namespace fl::infer
