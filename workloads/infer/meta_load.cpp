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

bool before(const std::string& v, int major, int minor, int patch) {
  return ops::stated_and_older(v, major, minor, patch);
}

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

// torch's named_modules() order: every leaf with parameters, "path (Class)".
void leaves(const Module& m, const std::string& prefix, std::vector<const Module*>& mods,
            std::vector<std::string>& names) {
  for (const Module& c : m.children) {
    const std::string path = prefix.empty() ? c.name : prefix + "." + c.name;
    if (has_parameters(c)) {
      mods.push_back(&c);
      names.push_back(fmt::format("{} ({})", path, c.type));
    }
    leaves(c, path, mods, names);
  }
}

// The kernel-injection containers that load a meta model (MetaTensorContainer), by version.
bool meta_container(const std::string& model_class, const std::string& v) {
  if (model_class == "bloom") return true;
  if (model_class == "opt" || model_class == "gpt_neox") return !before(v, 0, 7, 7);  // PR 2547
  if (model_class == "llama") return !before(v, 0, 11, 0);                            // PR 4147
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

// Kernel injection's containers on a meta model: every module loaded, or DeepSpeed's error.
void kernel_meta_load(const InjectionChoice& c, const std::vector<std::string>& names,
                      const std::string& description_type, const std::string& parallelization,
                      MetaLoad& out) {
  const std::string& v = c.deepspeed_version;
  if (!meta_container(c.model_class, v)) {
    if (!before(v, 0, 9, 3)) {
      // BaseTransformerContainer.check_meta_tensor_support, at the layer's replacement.
      raise<CheckpointError>(
          "AssertionError: Meta tensors are not supported for this model currently. ({} of "
          "DeepSpeed {} is no MetaTensorContainer)",
          container_name(c.model_class), v.empty() ? "(newest)" : v);
    }
    if (!before(v, 0, 8, 1) && !description_type.empty()) {
      raise<CheckpointError>(
          "AssertionError: Meta Tensor checkpoint loading not supported in {} container",
          container_name(c.model_class));
    }
    raise<ConfigError>(
        "workload.infer.meta_tensor with kernel injection of {} on DeepSpeed {}: a container "
        "without meta tensor support before 0.8.1 is not modelled",
        c.model_class, v);
  }
  if (description_type.empty()) {
    out.left = names;  // the containers copy the meta layers' tensors: nothing to fill them
  } else if (!before(v, 0, 8, 1) && before(v, 0, 8, 2) && parallelization != "tp") {
    // load_checkpoint.py 0.8.1: a 'pp' description (no 'parallelization: tp') loads each
    // layer through replace_policy.load_params, which only the containers define.
    raise<CheckpointError>(
        "AttributeError: '{}' object has no attribute 'load_params' (DeepSpeed 0.8.1's "
        "load_model_with_checkpoint calls it on the container's policy for a description "
        "without 'parallelization: tp')",
        policy_name(c.model_class));
  } else {
    out.loader = fmt::format("kernel injection's {} loaded every module from the checkpoint",
                             container_name(c.model_class));
  }
}

}  // namespace

MetaLoad load_meta_model(const InjectionChoice& c, int layers, const std::string& description_type,
                         const std::string& parallelization) {
  const std::string& v = c.deepspeed_version;
  const Module model = model_of(c.model_class, layers);
  std::vector<const Module*> mods;
  std::vector<std::string> names;
  leaves(model, "", mods, names);
  MetaLoad out;
  out.copy_site = "the engine's module.to(device) in InferenceEngine.__init__";
  if (c.mode == "megatron") {
    // No init_inference: the script moves the model itself (DeepSpeedExamples' DSPipeline
    // calls self.model.cuda() before generate), and nothing has read the checkpoint into it.
    out.left = names;
    out.copy_site = "the pipeline's model.cuda() before generate (no init_inference ran)";
    return out;
  }
  const std::string t = lower_ascii(description_type);
  if (!description_type.empty() && t != "bloom" && t != "ds_model") {
    raise<ConfigError>(
        "workload.infer.meta_tensor: the checkpoint description's type is '{}'; DeepSpeed's meta "
        "loaders read only a description that get_sd_loader_json hands back as it is (type "
        "BLOOM or ds_model), and another type with meta tensors is not modelled",
        description_type);
  }
  const bool hf_device = c.model_class != "megatron_gpt";  // module.device: a HF model's
  if (c.mode == "kernel") {
    kernel_meta_load(c, names, description_type, parallelization, out);
  } else {
    const bool runs = c.mode == "policy" || !c.policy.empty() || c.tp > 1 || before(v, 0, 9, 3);
    if (before(v, 0, 9, 3) || !runs || description_type.empty()) {
      out.left = names;
      if (runs && c.tp > 1) {
        out.copy_site = "AutoTP's slicing of the first Linear it shards (ReplaceWithTensorSlicing)";
      }
    } else {
      for (size_t i = 0; i < mods.size(); ++i) {
        if (!tp_loader_reads(*mods[i], v)) out.left.push_back(names[i]);
      }
      out.loader =
          fmt::format("{}'s loader read the checkpoint's Linear, Embedding, LayerNorm{} modules",
                      c.mode == "autotp" ? "AutoTP" : "injection_policy",
                      before(v, 0, 10, 2) ? " and OPTLearnedPositionalEmbedding"
                                          : ", OPTLearnedPositionalEmbedding and LlamaRMSNorm");
    }
  }
  // 0.12.6 on: a HF model whose first parameter is still on meta goes to to_empty().
  if (!out.left.empty() && hf_device && !before(v, 0, 12, 6) && out.left.front() == names.front() &&
      out.copy_site.find("module.to") != std::string::npos) {
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
  return "meta tensors: " + m.loader;
}

}  // namespace fl::infer
