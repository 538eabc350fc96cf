// init_inference's sharding choice (workloads/infer/auto_tp.hpp): AutoTP reads the model's name
// from its printout and its row-parallel Linears from the module walk, by the rules of the
// DeepSpeed version; its assertions are DeepSpeed's (deepspeedai/DeepSpeed#3711, #3628), and a
// plan is served only when it is the GPT's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "workloads/infer/auto_tp.hpp"

namespace fl::infer {
namespace {

constexpr const char* kUseKernel =
    "AssertionError: AutoTP not supported for model. Please use kernel injection since container "
    "policy for model exists.";
constexpr const char* kNoPolicy =
    "AssertionError: Not able to determine model policy automatically. Please provide policy.";

std::string parse_error(const std::string& model_class, const std::string& version) {
  try {
    auto_tp_parser(model_of(model_class, 2), version);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> plan(const std::string& model_class, const std::string& version) {
  const auto p = auto_tp_parser(model_of(model_class, 2), version);
  EXPECT_EQ(p.size(), 1u);  // one decoder layer class
  auto names = p.front().all_reduce;
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AutoTp, ThePrintoutIsTorchs) {
  const std::string r = module_repr(model_of("gpt2", 2));
  EXPECT_EQ(r.rfind("GPT2LMHeadModel(\n  (transformer): GPT2Model(\n    (wte): Embedding()\n", 0),
            0u)
      << r;
  EXPECT_NE(r.find("      (1): GPT2Block(\n        (ln_1): LayerNorm()\n"), std::string::npos) << r;
}

// GPT-2 is on AutoTP's unsupported list from 0.8.2 and has a container policy (GPT2Block); before
// that its Conv1D layers are no nn.Linear, so the walk finds nothing: the same assertion.
TEST(AutoTp, Gpt2AndMegatronAreSentToKernelInjection) {
  EXPECT_EQ(parse_error("gpt2", "0.9.2"), kUseKernel);
  EXPECT_EQ(parse_error("gpt2", "0.8.1"), kUseKernel);
  EXPECT_EQ(parse_error("gpt2", ""), kUseKernel);
  // Megatron's name ("TransformerLanguage") is supported, but its parallel Linears are not
  // nn.Linear and ParallelTransformerLayer has a container.
  EXPECT_EQ(parse_error("megatron_gpt", "0.9.2"), kUseKernel);
}

// Llama's RMSNorm is no LayerNorm and o_proj/down_proj were matched by name from 0.9.3 (PR 3170),
// when its container came too (PR 3425).
TEST(AutoTp, LlamaNeedsAPolicyBefore093) {
  EXPECT_EQ(parse_error("llama", "0.9.2"), kNoPolicy);
  EXPECT_EQ(plan("llama", "0.9.3"),
            (std::vector<std::string>{"mlp.down_proj", "self_attn.o_proj"}));
}

TEST(AutoTp, TheLayerNormHeuristicAndItsWrapAround) {
  // OPT: out_proj by name, fc2 as the Linear before final_layer_norm.
  EXPECT_EQ(plan("opt", "0.8.1"), (std::vector<std::string>{".fc2", "self_attn.out_proj"}));
  // GPT-NeoX registers its two norms first: the first one's predecessor wraps around to the
  // layer's last Linear, the second is preceded by a norm; attention.dense has its own rule from
  // 0.10.0 (PR 3778), before which AutoTP left it column-parallel (DeepSpeed#3130).
  EXPECT_EQ(plan("gpt_neox", "0.9.5"), (std::vector<std::string>{"mlp.dense_4h_to_h"}));
  EXPECT_EQ(plan("gpt_neox", "0.10.0"),
            (std::vector<std::string>{"attention.dense", "mlp.dense_4h_to_h"}));
}

std::string choose_error(const InjectionChoice& c) {
  try {
    choose_injection(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(AutoTp, InitInferenceServesOnlyTheGptsOwnPlan) {
  EXPECT_EQ(choose_injection({"megatron", "gpt2", {}, 2, ""}), "");
  EXPECT_EQ(choose_error({"autotp", "megatron_gpt", {}, 2, "0.9.2"}), kUseKernel);
  EXPECT_NE(choose_injection({"kernel", "megatron_gpt", {}, 2, "0.9.2"}), "");
  // A policy naming the attention output and the second MLP Linear is the GPT's plan.
  EXPECT_NE(
      choose_injection({"policy", "llama", {"self_attn.o_proj", "mlp.down_proj"}, 2, "0.9.2"}), "");
  EXPECT_NE(choose_error({"policy", "llama", {"mlp.down_proj"}, 2, "0.9.2"})
                .find("row-parallel; serving another plan is not modelled"),
            std::string::npos);
  // Names are matched exactly as replace_wo_policy makes them: a bare "o_proj" names nothing,
  // OPT's direct child is ".fc2".
  EXPECT_NE(choose_error({"policy", "llama", {"o_proj", "mlp.down_proj"}, 2, "0.9.2"}), "");
  EXPECT_EQ(choose_error({"policy", "opt", {"self_attn.out_proj", ".fc2"}, 2, "0.9.2"}), "");
  EXPECT_NE(choose_error({"policy", "opt", {"self_attn.out_proj", "fc2"}, 2, "0.9.2"}), "");
  // A policy beside kernel injection is DeepSpeed's assertion; beside AutoTP it replaces it.
  EXPECT_EQ(choose_error({"kernel", "llama", {"self_attn.o_proj", "mlp.down_proj"}, 2, "0.9.3"}),
            "AssertionError: Cannot use both user specified injection policy and kernel "
            "injection");
  EXPECT_EQ(choose_error({"autotp", "llama", {"self_attn.o_proj", "mlp.down_proj"}, 2, "0.9.2"}),
            "");
  EXPECT_NE(choose_error({"policy", "llama", {}, 2, "0.9.2"}), "");
  EXPECT_NE(choose_error({"megatron", "llama", {"self_attn.o_proj"}, 2, ""}), "");
  // Containers by version: OPT's from 0.7.1, GPT-NeoX's from 0.6.5.
  EXPECT_NE(choose_error({"kernel", "opt", {}, 2, "0.7.0"}), "");
  EXPECT_EQ(choose_error({"kernel", "opt", {}, 2, "0.7.1"}), "");
  // AutoTP's GPT-NeoX plan before 0.10.0 is refused, not served.
  EXPECT_NE(choose_error({"autotp", "gpt_neox", {}, 2, "0.9.5"}).find("not modelled"),
            std::string::npos);
  EXPECT_EQ(choose_error({"autotp", "gpt_neox", {}, 2, "0.10.0"}), "");
  // Kernel injection of a class without a container replaces nothing (not modelled).
  EXPECT_NE(choose_error({"kernel", "llama", {}, 2, "0.9.2"}).find("no container policy"),
            std::string::npos);
  EXPECT_EQ(choose_error({"kernel", "llama", {}, 2, "0.9.3"}), "");
  // At tp 1 AutoTP runs only before 0.9.3 (PR 3449).
  EXPECT_EQ(choose_error({"autotp", "llama", {}, 1, "0.9.2"}), kNoPolicy);
  EXPECT_EQ(choose_error({"autotp", "llama", {}, 1, "0.9.3"}), "");
  EXPECT_NE(choose_error({"autotp", "llama", {}, 2, "0.8.0"}).find("0.8.1"), std::string::npos);
  EXPECT_NE(choose_error({"autotp", "bert", {}, 2, ""}).find("allowed: gpt2, gpt_neox"),
            std::string::npos);
}

// BLOOM: on AutoTP's unsupported list before 0.9.0 (PR 3035), then the Linear before each norm,
// the first norm's wrapping round to the MLP's last Linear.
TEST(AutoTp, BloomBefore090IsSentToKernelInjectionThenParsed) {
  EXPECT_EQ(parse_error("bloom", "0.8.3"), kUseKernel);
  EXPECT_EQ(plan("bloom", "0.9.0"),
            (std::vector<std::string>{"mlp.dense_4h_to_h", "self_attention.dense"}));
}

bool load_fails(const std::string& mode, const std::string& version, const std::string& type) {
  try {
    check_checkpoint_load({mode, "bloom", {}, 2, version}, type);
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("AttributeError: 'dict' object has no attribute 'load'"),
              std::string::npos);
    return true;
  }
  return false;
}

// With kernel injection off, DeepSpeed before 0.9.3 loads a description through _load_checkpoint,
// which gets the description itself back for BLOOM (and from 0.7.7 ds_model) types
// (deepspeedai/DeepSpeed#2557).
TEST(AutoTp, ABloomDescriptionWithoutKernelInjectionIsADictWithoutLoad) {
  EXPECT_TRUE(load_fails("autotp", "0.7.6", "BLOOM"));
  EXPECT_TRUE(load_fails("policy", "0.9.2", "bloom"));
  EXPECT_FALSE(load_fails("autotp", "0.7.6", "ds_model"));
  EXPECT_TRUE(load_fails("autotp", "0.7.7", "ds_model"));
  EXPECT_FALSE(load_fails("autotp", "0.8.0", "Megatron"));
  EXPECT_FALSE(load_fails("kernel", "0.7.6", "BLOOM"));
  EXPECT_FALSE(load_fails("autotp", "0.9.3", "BLOOM"));
  EXPECT_FALSE(load_fails("autotp", "", "BLOOM"));
  EXPECT_FALSE(load_fails("megatron", "0.7.6", "BLOOM"));
}

}  // namespace
}  // namespace fl::infer
