// Serving a model built on the meta device: deepspeed.OnDevice(device="meta") (the
// DeepSpeedExamples text-generation pipeline's --use_meta_tensor, the BLOOM inference scripts)
// creates every parameter without storage, and only a loader that reads the checkpoint fills
// them. Which modules a loader fills is DeepSpeed's, by version and by how init_inference shards
// the model (auto_tp.hpp):
// - kernel injection loads every module of a container that supports meta tensors (BLOOM; from
//   0.7.7 also OPT and GPT-NeoX; from 0.11.0 LLaMA, pull request 3608). 0.8.1 called load_params
//   on the policy instead of the container for a description without 'parallelization: tp'
//   (pull request 2875, first in 0.8.2). Another container asserts from 0.9.3 to 0.10.3 (its
//   check_meta_tensor_support; 0.11.0 commented the call out) and otherwise copies the meta
//   layer's weights into its own module;
// - AutoTP and injection_policy load nothing before 0.9.3 (the checkpoint goes to
//   _load_checkpoint or is dropped); from 0.9.3 (pull request 3102) they load only the modules
//   of the classes their loader lists (nn.Linear, nn.Embedding, nn.LayerNorm,
//   OPTLearnedPositionalEmbedding; from 0.10.2, pull request 4147, also LlamaRMSNorm). Their
//   slicing copies each decoder layer's Linear (GPT-2: Conv1D) to the device; from 0.12.6 (pull
//   request 4692) it gives a meta one empty memory instead. AutoTP does not run at tp 1 from 0.9.3;
// - without init_inference (workload.infer.injection megatron) nothing loads.
// A module left on meta fails the first copy of it (the slicing, a container's copy, the engine's
// module.to(device), or the example pipeline's model.cuda() without init_inference) with torch's
// "NotImplementedError: Cannot copy out of meta tensor; no data!". From 0.12.6 the engine moves a
// Hugging Face model whose first parameter is still on meta with to_empty(), which gives every
// parameter, loaded or not, uninitialized memory and raises nothing.
#pragma once

#include <string>
#include <vector>

#include "workloads/infer/auto_tp.hpp"

namespace fl::infer {

struct MetaLoad {
  // The modules that hold parameters and are still on the meta device after the loaders ran, in
  // module order, as "model.layers.0.input_layernorm (LlamaRMSNorm)".
  std::vector<std::string> left;
  // The modules that got empty (uninitialized) memory instead of the checkpoint's: a meta
  // container's layers without a checkpoint, AutoTP's slicing from 0.12.6.
  std::vector<std::string> uninitialized;
  std::string loader;     // what filled the others ("": nothing ran)
  std::string copy_site;  // where the first copy of the model happens
  bool to_empty = false;  // moved with to_empty(): every parameter uninitialized, no error
};

// The checkpoint init_inference got: its description's type ("" : none given) and
// 'parallelization' ("pp" unless the description says "tp"), and whether the state dict's keys
// carry the causal-LM wrapper's attribute (`model.` for facebook/opt-125m to 2.7b, `transformer.`
// for BLOOM fine-tunes such as TigerBot) or start below it (`decoder.` for opt-350m and larger,
// bigscience/bloom's `h.0.`), which only OPT and BLOOM files differ in.
struct MetaCheckpoint {
  std::string type;
  std::string parallelization = "pp";
  bool wrapped_keys = false;
};

// What the loaders leave of a meta model of `c.model_class` with `layers` decoder layers, loaded
// from `ckpt`. Throws CheckpointError with DeepSpeed's text where its loader stops, ConfigError
// for what is not modelled. Kernel injection's loader drops the wrapper's name from the names it
// looks up for OPT and BLOOM from a 'pp' description (their policies' use_load_prefix), unless,
// from 0.8.3 (pull request 2990), a key starts with `model.`, or, from 0.10.0 (pull request 3885),
// with `transformer.`: before those, wrapped keys meet "KeyError: 'decoder.embed_tokens.weight'"
// (OPT) or "KeyError: 'word_embeddings.weight'" (BLOOM) at the first module outside the layers.
MetaLoad load_meta_model(const InjectionChoice& c, int layers, const MetaCheckpoint& ckpt);

// The copy to the device: throws CheckpointError with torch's error naming the modules left on
// meta (unless to_empty moved them); returns the line rank 0 prints.
std::string move_meta_model(const MetaLoad& m);

}  // namespace fl::infer
