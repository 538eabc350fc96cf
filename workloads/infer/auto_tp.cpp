// init_inference's sharding choice and AutoTP's parser (auto_tp.hpp), as DeepSpeed 0.8.1 to 0.10
// wrote them (deepspeed/inference/engine.py, deepspeed/module_inject/auto_tp.py).
#include "workloads/infer/auto_tp.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "kernels/versions.hpp"

namespace fl::infer {
namespace {

using Kind = Module::Kind;

Module leaf(std::string name, std::string type, Kind kind = Kind::kOther) {
  return {std::move(name), std::move(type), kind, {}};
}
Module linear(std::string name) {
  return leaf(std::move(name), "Linear", Kind::kLinear);
}
Module layer_norm(std::string name) {
  return leaf(std::move(name), "LayerNorm", Kind::kLayerNorm);
}
Module node(std::string name, std::string type, std::vector<Module> children) {
  return {std::move(name), std::move(type), Kind::kOther, std::move(children)};
}
Module layers_of(std::string name, const Module& layer, int n) {
  Module list{std::move(name), "ModuleList", Kind::kModuleList, {}};
  for (int i = 0; i < n; ++i) {
    Module m = layer;
    m.name = std::to_string(i);
    list.children.push_back(std::move(m));
  }
  return list;
}

// One architecture: its decoder layer, the whole model around n of them, the names of the
// layer's two row-parallel Linears in the GPT's computation (attention output, MLP output), and
// the DeepSpeed version whose container policies first replaced its layer class.
struct Architecture {
  Module (*model)(int layers);
  std::vector<std::string> row_parallel;
  int container_since[3];
};

Module gpt2_block() {
  // transformers' GPT2Block: Conv1D (weights stored transposed), not nn.Linear.
  return node("", "GPT2Block",
              {layer_norm("ln_1"),
               node("attn", "GPT2Attention",
                    {leaf("c_attn", "Conv1D"), leaf("c_proj", "Conv1D"),
                     leaf("attn_dropout", "Dropout"), leaf("resid_dropout", "Dropout")}),
               layer_norm("ln_2"),
               node("mlp", "GPT2MLP",
                    {leaf("c_fc", "Conv1D"), leaf("c_proj", "Conv1D"),
                     leaf("act", "NewGELUActivation"), leaf("dropout", "Dropout")})});
}
Module gpt2(int n) {
  return node("", "GPT2LMHeadModel",
              {node("transformer", "GPT2Model",
                    {leaf("wte", "Embedding"), leaf("wpe", "Embedding"), leaf("drop", "Dropout"),
                     layers_of("h", gpt2_block(), n), layer_norm("ln_f")}),
               linear("lm_head")});
}

Module neox_layer() {
  return node(
      "", "GPTNeoXLayer",
      {layer_norm("input_layernorm"), layer_norm("post_attention_layernorm"),
       leaf("post_attention_dropout", "Dropout"), leaf("post_mlp_dropout", "Dropout"),
       node("attention", "GPTNeoXAttention",
            {leaf("rotary_emb", "GPTNeoXRotaryEmbedding"), linear("query_key_value"),
             linear("dense"), leaf("attention_dropout", "Dropout")}),
       node("mlp", "GPTNeoXMLP",
            {linear("dense_h_to_4h"), linear("dense_4h_to_h"), leaf("act", "GELUActivation")})});
}
Module gpt_neox(int n) {
  return node("", "GPTNeoXForCausalLM",
              {node("gpt_neox", "GPTNeoXModel",
                    {leaf("embed_in", "Embedding"), leaf("emb_dropout", "Dropout"),
                     layers_of("layers", neox_layer(), n), layer_norm("final_layer_norm")}),
               linear("embed_out")});
}

Module llama_layer() {
  // LlamaRMSNorm is not an nn.LayerNorm and its attribute names are not 'LayerNorm'.
  return node(
      "", "LlamaDecoderLayer",
      {node("self_attn", "LlamaAttention",
            {linear("q_proj"), linear("k_proj"), linear("v_proj"), linear("o_proj"),
             leaf("rotary_emb", "LlamaRotaryEmbedding")}),
       node("mlp", "LlamaMLP",
            {linear("gate_proj"), linear("down_proj"), linear("up_proj"),
             leaf("act_fn", "SiLUActivation")}),
       leaf("input_layernorm", "LlamaRMSNorm"), leaf("post_attention_layernorm", "LlamaRMSNorm")});
}
Module llama(int n) {
  return node("", "LlamaForCausalLM",
              {node("model", "LlamaModel",
                    {leaf("embed_tokens", "Embedding"), layers_of("layers", llama_layer(), n),
                     leaf("norm", "LlamaRMSNorm")}),
               linear("lm_head")});
}

Module opt_layer() {
  return node("", "OPTDecoderLayer",
              {node("self_attn", "OPTAttention",
                    {linear("k_proj"), linear("v_proj"), linear("q_proj"), linear("out_proj")}),
               leaf("activation_fn", "ReLU"), layer_norm("self_attn_layer_norm"), linear("fc1"),
               linear("fc2"), layer_norm("final_layer_norm")});
}
Module opt(int n) {
  return node("", "OPTForCausalLM",
              {node("model", "OPTModel",
                    {node("decoder", "OPTDecoder",
                          {leaf("embed_tokens", "Embedding"),
                           leaf("embed_positions", "OPTLearnedPositionalEmbedding"),
                           layer_norm("final_layer_norm"), layers_of("layers", opt_layer(), n)})}),
               linear("lm_head")});
}

Module megatron_layer() {
  // Megatron's tensor-parallel Linears are modules of their own, not nn.Linear, and its fused
  // layer norm is not an nn.LayerNorm.
  return node("", "ParallelTransformerLayer",
              {leaf("input_layernorm", "MixedFusedLayerNorm"),
               node("self_attention", "ParallelAttention",
                    {leaf("query_key_value", "ColumnParallelLinear"),
                     leaf("core_attention", "CoreAttention"), leaf("dense", "RowParallelLinear")}),
               leaf("post_attention_layernorm", "MixedFusedLayerNorm"),
               node("mlp", "ParallelMLP",
                    {leaf("dense_h_to_4h", "ColumnParallelLinear"),
                     leaf("dense_4h_to_h", "RowParallelLinear")})});
}
Module megatron_gpt(int n) {
  return node(
      "", "GPTModel",
      {node("language_model", "TransformerLanguageModel",
            {node("embedding", "Embedding",
                  {leaf("word_embeddings", "VocabParallelEmbedding"),
                   leaf("position_embeddings", "Embedding"), leaf("embedding_dropout", "Dropout")}),
             node("encoder", "ParallelTransformer",
                  {layers_of("layers", megatron_layer(), n),
                   leaf("final_layernorm", "MixedFusedLayerNorm")})})});
}

Module bloom_block() {
  return node(
      "", "BloomBlock",
      {layer_norm("input_layernorm"),
       node("self_attention", "BloomAttention",
            {linear("query_key_value"), linear("dense"), leaf("attention_dropout", "Dropout")}),
       layer_norm("post_attention_layernorm"),
       node("mlp", "BloomMLP",
            {linear("dense_h_to_4h"), leaf("gelu_impl", "BloomGelu"), linear("dense_4h_to_h")})});
}
Module bloom(int n) {
  return node("", "BloomForCausalLM",
              {node("transformer", "BloomModel",
                    {leaf("word_embeddings", "Embedding"), layer_norm("word_embeddings_layernorm"),
                     layers_of("h", bloom_block(), n), layer_norm("ln_f")}),
               linear("lm_head")});
}

const std::vector<std::pair<std::string, Architecture>>& architectures() {
  static const std::vector<std::pair<std::string, Architecture>> a = {
      {"gpt2", {gpt2, {"attn.c_proj", "mlp.c_proj"}, {0, 0, 0}}},
      {"gpt_neox", {gpt_neox, {"attention.dense", "mlp.dense_4h_to_h"}, {0, 6, 5}}},
      {"llama", {llama, {"self_attn.o_proj", "mlp.down_proj"}, {0, 9, 3}}},  // PR 3425
      {"opt", {opt, {"self_attn.out_proj", "fc2"}, {0, 7, 1}}},
      {"megatron_gpt", {megatron_gpt, {"self_attention.dense", "mlp.dense_4h_to_h"}, {0, 0, 0}}},
      {"bloom", {bloom, {"self_attention.dense", "mlp.dense_4h_to_h"}, {0, 0, 0}}},
  };
  return a;
}

const Architecture& architecture(const std::string& model_class) {
  for (const auto& [name, a] : architectures()) {
    if (name == model_class) return a;
  }
  raise<ConfigError>(
      "workload.infer.model_class '{}' is not an architecture faultline serves "
      "(allowed: {})",
      model_class, fmt::join(model_classes(), ", "));
}

bool older(const std::string& v, int major, int minor, int patch) {
  return ops::stated_and_older(v, major, minor, patch);
}

void repr_into(const Module& m, int indent, std::string& out) {
  out += m.type + "(";
  if (m.children.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  for (const Module& c : m.children) {
    out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + c.name + "): ";
    repr_into(c, indent + 2, out);
    out += "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ') + ")";
}

// AutoTP.get_module_list: the distinct classes of the modules held in ModuleLists.
void module_list(const Module& m, std::vector<const Module*>& out) {
  for (const Module& c : m.children) {
    if (c.kind != Kind::kModuleList) {
      module_list(c, out);
      continue;
    }
    for (const Module& layer : c.children) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const Module* o) { return o->type == layer.type; });
      if (!seen) out.push_back(&layer);
    }
  }
}

bool is_norm(const Module& c) {
  return c.kind == Kind::kLayerNorm || c.name == "LayerNorm" || c.name == "layer_norm";
}

// AutoTP.get_layers(parent, module): "parent.key" for each Linear, "ln" for each norm, recursing
// into the rest (a child's name becomes the parent of its own children).
void get_layers(const std::string& parent, const Module& m, std::vector<std::string>& out) {
  for (const Module& c : m.children) {
    if (c.kind == Kind::kLinear) {
      out.push_back(parent + "." + c.name);
    } else if (is_norm(c)) {
      out.push_back("ln");
    } else {
      get_layers(c.name, c, out);
    }
  }
}

// The layer classes that have a kernel-injection container at `version`.
bool kernel_supported(const std::vector<const Module*>& list, const std::string& version) {
  for (const Module* m : list) {
    for (const auto& [name, a] : architectures()) {
      const Module probe = a.model(1);
      std::vector<const Module*> layers;
      module_list(probe, layers);
      const auto* since = a.container_since;
      if (!layers.empty() && layers.front()->type == m->type &&
          !older(version, since[0], since[1], since[2])) {
        return true;
      }
    }
  }
  return false;
}

constexpr const char* kUseKernelInjection =
    "AutoTP not supported for model. Please use kernel injection since container policy for "
    "model exists.";

// AutoTP.supported(model): the model's name read from its printout against the unsupported list.
bool supported(const std::string& repr, const std::string& version) {
  std::set<std::string> unsupported = {"flaubert", "xlm"};
  if (older(version, 0, 9, 0)) unsupported.insert("bloom");     // PR 3035 took it off
  if (older(version, 0, 10, 1)) unsupported.insert("codegen");  // PR 3844 took it off
  if (!older(version, 0, 8, 2)) {
    unsupported.insert({"deberta", "fsmt", "gpt2", "led", "longformer", "xlnet"});
  }
  std::smatch key;
  static const std::regex model_re(": (.*?)Model"), stack_re(": (.*?)Stack"), head_re("(.*?)Model");
  if (!std::regex_search(repr, key, model_re) && !std::regex_search(repr, key, stack_re) &&
      !std::regex_search(repr, key, head_re, std::regex_constants::match_continuous)) {
    raise<ConfigError>(
        "AssertionError: Not able to determine model policy automatically. Please provide "
        "policy.");
  }
  return unsupported.count(lower_ascii(key[1].str())) == 0;
}

// The row-parallel Linears AutoTP finds in one layer class, by `version`'s rules.
std::vector<std::string> layer_gems(const Module& layer, const std::string& repr,
                                    const std::string& version) {
  std::vector<std::string> list;
  for (const Module& c : layer.children) {
    if (c.kind == Kind::kLinear) {
      list.push_back("." + c.name);
    } else if (is_norm(c)) {
      list.push_back("ln");
    } else {
      get_layers(c.name, c, list);
    }
  }
  std::vector<std::string> gems;
  const bool o_proj_rule = !older(version, 0, 9, 3);  // PR 3170
  const bool neox_rule = !older(version, 0, 10, 0) && repr.find("GPTNeoX") != std::string::npos;
  const auto n = static_cast<long>(list.size());
  for (long i = 0; i < n; ++i) {
    const std::string& l = list[static_cast<size_t>(i)];
    if (l == "ln") {
      // Python's list[i - 1]: the layer's last entry for the first one.
      const std::string& prev = list[static_cast<size_t>((i - 1 + n) % n)];
      if (prev != "ln") gems.push_back(prev);
    } else if (l.find("out_proj") != std::string::npos ||
               (o_proj_rule && (l.find("o_proj") != std::string::npos ||
                                l.find("down_proj") != std::string::npos)) ||
               (neox_rule && l.find("attention.dense") != std::string::npos)) {
      gems.push_back(l);
    }
  }
  std::sort(gems.begin(), gems.end());
  gems.erase(std::unique(gems.begin(), gems.end()), gems.end());
  return gems;
}

std::string without_dot(std::string s) {
  return !s.empty() && s[0] == '.' ? s.substr(1) : s;
}

// The plan against the GPT's computation: its two row-parallel Linears, no more, no fewer.
std::string check_plan(const std::string& how, const std::string& layer_class,
                       std::vector<std::string> names, const Architecture& a, int tp) {
  for (auto& n : names) n = without_dot(n);
  std::sort(names.begin(), names.end());
  std::vector<std::string> want = a.row_parallel;
  std::sort(want.begin(), want.end());
  if (names != want) {
    raise<ConfigError>(
        "{} makes [{}] of {} row-parallel (LinearAllreduce), but the GPT computes [{}] "
        "row-parallel; serving another plan is not modelled",
        how, fmt::join(names, ", "), layer_class, fmt::join(want, ", "));
  }
  return fmt::format("{}: each {} all-reduces after [{}] over tp {}", how, layer_class,
                     fmt::join(names, ", "), tp);
}

}  // namespace

const std::vector<std::string>& model_classes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, a] : architectures()) v.push_back(name);
    return v;
  }();
  return names;
}

Module model_of(const std::string& model_class, int layers) {
  return architecture(model_class).model(layers);
}

std::string lower_ascii(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

std::string module_repr(const Module& m) {
  std::string out;
  repr_into(m, 0, out);
  return out;
}

std::vector<TpPolicy> auto_tp_parser(const Module& model, const std::string& version) {
  std::vector<const Module*> list;
  module_list(model, list);
  const std::string repr = module_repr(model);
  if (!supported(repr, version)) {
    raise<ConfigError>("AssertionError: {}", kernel_supported(list, version)
                                                 ? kUseKernelInjection
                                                 : "AutoTP not supported for model. Please "
                                                   "provide policy.");
  }
  std::vector<TpPolicy> plan;
  for (const Module* layer : list) {
    auto gems = layer_gems(*layer, repr, version);
    if (!gems.empty()) plan.push_back({layer->type, std::move(gems)});
  }
  if (plan.empty()) {
    raise<ConfigError>("AssertionError: {}", kernel_supported(list, version)
                                                 ? kUseKernelInjection
                                                 : "Not able to determine model policy "
                                                   "automatically. Please provide policy.");
  }
  return plan;
}

void check_checkpoint_load(const InjectionChoice& c, const std::string& description_type) {
  if (c.mode == "megatron" || c.mode == "kernel") return;
  const std::string& v = c.deepspeed_version;
  if (!older(v, 0, 9, 3)) return;  // PR 3102: no _load_checkpoint without kernel injection
  const std::string t = lower_ascii(description_type);
  const bool raw =
      older(v, 0, 7, 7) ? t.find("bloom") != std::string::npos : (t == "bloom" || t == "ds_model");
  if (!raw) return;
  raise<CheckpointError>(
      "AttributeError: 'dict' object has no attribute 'load' (InferenceEngine._load_checkpoint "
      "with kernel injection off: SDLoaderFactory.get_sd_loader_json returns a '{}' checkpoint "
      "description as it is, for kernel injection's loader, and _load_checkpoint calls "
      "sd_loader.load on it)",
      description_type);
}

std::string choose_injection(const InjectionChoice& c) {
  if (c.mode == "megatron" && !c.policy.empty()) {
    raise<ConfigError>(
        "workload.infer.injection_policy is init_inference's, but workload.infer.injection is "
        "megatron (allowed with it: policy, or autotp, which a policy replaces)");
  }
  if (c.mode == "megatron") return "";
  const Architecture& a = architecture(c.model_class);
  const Module model = a.model(1);
  std::vector<const Module*> layers;
  module_list(model, layers);
  const Module& layer = *layers.front();
  const std::string& v = c.deepspeed_version;
  if (c.mode == "kernel" && !c.policy.empty()) {
    raise<ConfigError>(
        "AssertionError: Cannot use both user specified injection policy and kernel injection");
  }
  if (c.mode == "policy" && c.policy.empty()) {
    raise<ConfigError>(
        "workload.infer.injection policy needs the Linear names in "
        "workload.infer.injection_policy (without them init_inference runs AutoTP: "
        "injection autotp)");
  }
  if (c.mode == "kernel") {
    if (!kernel_supported(layers, v)) {
      raise<ConfigError>(
          "kernel injection: DeepSpeed {} has no container policy for {}, so init_inference "
          "replaces nothing and every rank keeps the whole model unsharded; that is not "
          "modelled",
          v, layer.type);
    }
    return fmt::format("kernel injection: {}'s container policy shards it over tp {}", layer.type,
                       c.tp);
  }
  if (c.mode == "policy" || !c.policy.empty()) {
    // A policy given takes the place of AutoTP. replace_wo_policy names a Linear by its parent's
    // attribute, '.' and its own (".fc2" for a direct child), and a name the policy lists exactly
    // becomes LinearAllreduce.
    std::vector<std::string> linears, chosen;
    get_layers("", layer, linears);
    for (const auto& l : linears) {
      if (l != "ln" && std::find(c.policy.begin(), c.policy.end(), l) != c.policy.end()) {
        chosen.push_back(l);
      }
    }
    return check_plan(
        fmt::format("injection_policy {{{}: ({})}}", layer.type, fmt::join(c.policy, ", ")),
        layer.type, chosen, a, c.tp);
  }
  if (older(v, 0, 8, 1)) {
    raise<ConfigError>(
        "AutoTP came with DeepSpeed 0.8.1 (this job: {}); before it init_inference without "
        "kernel injection or a policy shards nothing, which is not modelled",
        v);
  }
  if (c.tp == 1 && !older(v, 0, 9, 3)) return "AutoTP: not run at tp 1 (DeepSpeed 0.9.3 on)";
  const auto plan = auto_tp_parser(model_of(c.model_class, 1), v);
  return check_plan("AutoTP", plan.front().layer_class, plan.front().all_reduce, a, c.tp);
}

}  // namespace fl::infer
