// Which modules DeepSpeed's loaders fill in a model built on the meta device (meta_load.hpp), as
// deepspeed/module_inject/{load_checkpoint,replace_module,auto_tp}.py and
// deepspeed/inference/engine.py of 0.7.7 to 0.12.6 do.
#include "workloads/infer/meta_load.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "kernels/versions.hpp"

namespace fl::infer {
namespace {

// True when the job states DeepSpeed `v` and it is older than major.minor.patch.
constexpr auto& before = ops::stated_and_older;

// The leaf classes of the served architectures that hold parameters.
bool has_parameters(const Module& m) {
  static const std::set<std::string> kinds = {"Linear",
                                              "LayerNorm",
                                              "Embedding",
                                              "Conv1D",
                                              "LlamaRMSNorm",
                                              "MixedFusedLayerNorm",
                                              "ColumnParallelLinear",
                                              "RowParallelLinear",
                                              "VocabParallelEmbedding",
                                              "OPTLearnedPositionalEmbedding"};
  return m.children.empty() && kinds.count(m.type) > 0;
}

// A leaf that holds parameters, in torch's named_modules() order.
struct Leaf {
  const Module* module;
  std::string name;  // "path (Class)"
  bool in_layer;     // inside a decoder layer (a ModuleList's entry)
};
void leaves(const Module& m, const std::string& prefix, bool in_layer, std::vector<Leaf>& out) {
  for (const Module& c : m.children) {
    const std::string path = prefix.empty() ? c.name : prefix + "." + c.name;
    if (has_parameters(c)) out.push_back({&c, fmt::format("{} ({})", path, c.type), in_layer});
    leaves(c, path, in_layer || m.kind == Module::Kind::kModuleList, out);
  }
}
std::vector<std::string> names_of(const std::vector<Leaf>& ls, bool (*keep)(const Leaf&)) {
  std::vector<std::string> out;
  for (const Leaf& l : ls) {
    if (keep(l)) out.push_back(l.name);
  }
  return out;
}

// The kernel-injection containers that load a meta model (MetaTensorContainer), by version.
bool meta_container(const std::string& model_class, const std::string& v) {
  if (model_class == "bloom") return true;
  if (model_class == "opt" || model_class == "gpt_neox") return !before(v, 0, 7, 7);  // PR 2547
  if (model_class == "llama") return !before(v, 0, 11, 0);                            // PR 3608
  return false;  // gpt2, megatron_gpt: never
}

// The container and policy class names DeepSpeed 0.8 gives each architecture.
std::string container_name(const std::string& model_class) {
  if (model_class == "gpt2") return "DS_GPT2Container";
  if (model_class == "megatron_gpt") return "DS_MegatronGPTContainer";
  if (model_class == "opt") return "DS_OPTContainer";
  if (model_class == "gpt_neox") return "DS_GPTNEOXContainer";
  if (model_class == "llama") return "DS_LLAMAContainer";
  return "DS_BloomContainer";
}
std::string policy_name(const std::string& model_class) {
  if (model_class == "opt") return "HFOPTLayerPolicy";
  if (model_class == "gpt_neox") return "GPTNEOXLayerPolicy";
  if (model_class == "bloom") return "BLOOMLayerPolicy";
  return container_name(model_class);
}

// The classes AutoTP's and injection_policy's loader reads from the checkpoint (0.9.3 on).
bool tp_loader_reads(const Module& m, const std::string& v) {
  static const std::set<std::string> classes = {"Linear", "Embedding", "LayerNorm",
                                                "OPTLearnedPositionalEmbedding"};
  if (classes.count(m.type) > 0) return true;
  return !before(v, 0, 10, 2) && m.type == "LlamaRMSNorm";  // PR 4147's load_layer_names
}

// The layers AutoTP's and injection_policy's slicing replaces (linear_policies: nn.Linear, and
// Conv1D for GPT-2), copying each weight to the device: a meta one fails there before 0.12.6 and
// becomes empty_like from 0.12.6 (auto_tp.move, pull request 4692).
bool sliced(const Leaf& l) {
  return l.in_layer && (l.module->type == "Linear" || l.module->type == "Conv1D");
}

// load_module_recursive's names against the checkpoint's keys (meta_load.hpp): the loader drops
// the wrapper's attribute for OPT and BLOOM from a 'pp' description unless the keys show it (from
// 0.8.3 `model.`, from 0.10.0 `transformer.`); a module found by its name's suffix is then read
// under the dropped name, which wrapped keys lack.
void check_key_names(const InjectionChoice& c, const std::vector<Leaf>& ls,
                     const MetaCheckpoint& ckpt) {
  const std::string& v = c.deepspeed_version;
  const bool opt = c.model_class == "opt", bloom = c.model_class == "bloom";
  if (!ckpt.wrapped_keys || ckpt.parallelization == "tp" || !(opt || bloom)) return;
  if (before(v, 0, 7, 7)) {
    raise<ConfigError>(
        "workload.infer.checkpoint_keys wrapped with DeepSpeed {}: the meta loader's key names "
        "before 0.7.7 are not modelled",
        v);
  }
  if ((opt && !before(v, 0, 8, 3)) || (bloom && !before(v, 0, 10, 0))) return;  // prefix_check
  // The first module outside the decoder layers, named below the wrapper.
  for (const Leaf& l : ls) {
    if (l.in_layer) continue;
    const std::string path = l.name.substr(0, l.name.find(' '));
    const std::string wrapper = opt ? "model." : "transformer.";
    if (path.rfind(wrapper, 0) != 0) continue;
    raise<CheckpointError>(
        "KeyError: '{}.weight' (DeepSpeed {}'s meta loader drops '{}' from the names it looks "
        "up, as {}'s policy asks, and this checkpoint's keys keep it: '{}.weight'; pull request "
        "{} looks at the keys first)",
        path.substr(wrapper.size()), v, wrapper, opt ? "OPT" : "BLOOM", path,
        opt ? "2990 (0.8.3)" : "3885 (0.10.0)");
  }
}

// Kernel injection's containers on a meta model: every module loaded, or DeepSpeed's error.
void kernel_meta_load(const InjectionChoice& c, const std::vector<Leaf>& ls,
                      const MetaCheckpoint& ckpt, MetaLoad& out) {
  const std::string& description_type = ckpt.type;
  const std::string& parallelization = ckpt.parallelization;
  const std::string& v = c.deepspeed_version;
  if (!meta_container(c.model_class, v)) {
    if (before(v, 0, 8, 1)) {
      raise<ConfigError>(
          "workload.infer.meta_tensor with kernel injection of {} on DeepSpeed {}: before 0.8.1 "
          "only BLOOM's (from 0.7.7 also OPT's and GPT-NeoX's) meta loading is modelled",
          c.model_class, v);
    }
    if (!before(v, 0, 9, 3) && before(v, 0, 11, 0)) {
      // BaseTransformerContainer.check_meta_tensor_support, at the layer's replacement (pull
      // request 2940; pull request 4313 commented its call out for 0.11.0).
      raise<CheckpointError>(
          "AssertionError: Meta tensors are not supported for this model currently. ({} of "
          "DeepSpeed {} is no MetaTensorContainer)",
          container_name(c.model_class), v);
    }
    // Otherwise the container copies the meta layer's weights into its own module.
    out.left = names_of(ls, [](const Leaf&) { return true; });
    out.copy_site = fmt::format(
        "kernel injection's {} copying the meta layer's weights (apply_tensor_parallelism)",
        container_name(c.model_class));
    return;
  }
  if (description_type.empty()) {
    // A MetaTensorContainer skips the copy: its layers hold uninitialized memory, and the
    // modules outside them stay on meta.
    out.left = names_of(ls, [](const Leaf& l) { return !l.in_layer; });
    out.uninitialized = names_of(ls, [](const Leaf& l) { return l.in_layer; });
    return;
  }
  // The walk meets the modules outside the decoder layers (the embedding first) before a layer's
  // load_params: wrapped keys fail there first.
  check_key_names(c, ls, ckpt);
  if (!before(v, 0, 8, 1) && before(v, 0, 8, 2) && parallelization != "tp") {
    // load_checkpoint.py 0.8.1: a 'pp' description (no 'parallelization: tp') loads each
    // layer through replace_policy.load_params, which only the containers define.
    raise<CheckpointError>(
        "AttributeError: '{}' object has no attribute 'load_params' (DeepSpeed 0.8.1's "
        "load_model_with_checkpoint calls it on the container's policy for a description "
        "without 'parallelization: tp')",
        policy_name(c.model_class));
  }
  out.loader = fmt::format("kernel injection's {} loaded every module from the checkpoint",
                           container_name(c.model_class));
}

// AutoTP's or injection_policy's loader and slicing on a meta model.
void tp_meta_load(const InjectionChoice& c, const std::vector<Leaf>& ls,
                  const std::string& description_type, MetaLoad& out) {
  const std::string& v = c.deepspeed_version;
  const std::string who = c.mode == "autotp" && c.policy.empty() ? "AutoTP" : "injection_policy";
  // Before 0.9.3 AutoTP runs at every tp; from 0.9.3 only above tp 1 (a policy always runs).
  const bool runs = who == "injection_policy" || c.tp > 1 || before(v, 0, 9, 3);
  const bool reads = runs && !before(v, 0, 9, 3) && !description_type.empty();
  if (reads) {
    out.loader =
        fmt::format("{}'s loader read the checkpoint's Linear, Embedding, LayerNorm{} modules", who,
                    before(v, 0, 10, 2) ? " and OPTLearnedPositionalEmbedding"
                                        : ", OPTLearnedPositionalEmbedding and LlamaRMSNorm");
  }
  bool slicing_fails = false;
  for (const Leaf& l : ls) {
    if (reads && tp_loader_reads(*l.module, v)) continue;
    if (runs && sliced(l) && !before(v, 0, 12, 6)) {
      out.uninitialized.push_back(l.name);  // auto_tp.move: empty_like
      continue;
    }
    slicing_fails = slicing_fails || (runs && sliced(l));
    out.left.push_back(l.name);
  }
  if (slicing_fails) {
    out.copy_site = fmt::format("{}'s slicing of a layer's weight it did not load ({})", who,
                                "ReplaceWithTensorSlicing, replace_wo_policy's _replace");
  }
}

}  // namespace

MetaLoad load_meta_model(const InjectionChoice& c, int layers, const MetaCheckpoint& ckpt) {
  const std::string& description_type = ckpt.type;
  const std::string& v = c.deepspeed_version;
  const Module model = model_of(c.model_class, layers);  // the leaves point into it
  std::vector<Leaf> ls;
  leaves(model, "", false, ls);
  MetaLoad out;
  out.copy_site = "the engine's module.to(device) in InferenceEngine.__init__";
  if (c.mode == "megatron") {
    // No init_inference: the script moves the model itself (DeepSpeedExamples' DSPipeline
    // calls self.model.cuda() before generate), and nothing has read the checkpoint into it.
    out.left = names_of(ls, [](const Leaf&) { return true; });
    out.copy_site = "the pipeline's model.cuda() before generate (no init_inference ran)";
    return out;
  }
  // get_sd_loader_json hands back as it is a BLOOM description (before 0.7.7 any type naming
  // bloom) and from 0.7.7 a ds_model one.
  const std::string t = lower_ascii(description_type);
  const bool raw =
      before(v, 0, 7, 7) ? t.find("bloom") != std::string::npos : (t == "bloom" || t == "ds_model");
  if (!description_type.empty() && !raw) {
    raise<ConfigError>(
        "workload.infer.meta_tensor: the checkpoint description's type is '{}'; DeepSpeed's meta "
        "loaders read only a description that get_sd_loader_json hands back as it is (type "
        "BLOOM, from 0.7.7 also ds_model), and another type with meta tensors is not modelled",
        description_type);
  }
  if (c.mode == "kernel") {
    kernel_meta_load(c, ls, ckpt, out);
  } else {
    tp_meta_load(c, ls, description_type, out);
  }
  // 0.12.6 on: a HF model (Megatron's GPTModel has no `device`) whose first parameter is still
  // on meta goes to to_empty(), which gives every parameter, loaded or not, empty memory.
  const bool hf_device = c.model_class != "megatron_gpt";
  if (!out.left.empty() && hf_device && !before(v, 0, 12, 6) &&
      out.left.front() == ls.front().name && out.copy_site.find("module.to") != std::string::npos) {
    out.to_empty = true;
    out.copy_site = "the engine's module.to_empty(device) (the first parameter is on meta)";
  }
  return out;
}

std::string move_meta_model(const MetaLoad& m) {
  if (m.to_empty) {
    return fmt::format(
        "meta tensors: {}; {} gave every parameter uninitialized memory ({} modules were never "
        "loaded)",
        m.loader.empty() ? "no loader ran" : m.loader, m.copy_site, m.left.size());
  }
  if (!m.left.empty()) {
    const size_t shown = std::min<size_t>(m.left.size(), 4);
    raise<CheckpointError>(
        "NotImplementedError: Cannot copy out of meta tensor; no data! (at {}: {} modules are "
        "still on the meta device: {}{}{})",
        m.copy_site, m.left.size(),
        fmt::join(m.left.begin(), m.left.begin() + static_cast<long>(shown), ", "),
        m.left.size() > shown ? ", ..." : "",
        m.loader.empty() ? "; no loader read the checkpoint" : "; " + m.loader);
  }
  if (!m.uninitialized.empty()) {
    raise<ConfigError>(
        "workload.infer.meta_tensor: {} modules ({}, ...) were given uninitialized memory and the "
        "rest loaded; serving a partly uninitialized model is not modelled",
        m.uninitialized.size(), m.uninitialized.front());
  }
  return "meta tensors: " + m.loader;
}

}  // namespace fl::infer
