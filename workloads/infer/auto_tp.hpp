// DeepSpeed's init_inference choosing how to shard a model across tensor-parallel ranks: kernel
// injection (a container policy replaces each layer class it knows), a user's injection_policy
// (the Linear layers it names become row-parallel, LinearAllreduce, the others column-parallel),
// or automatic tensor parallelism (AutoTP, deepspeed/module_inject/auto_tp.py), which walks the
// model's modules to find the Linear layers whose outputs need an all-reduce.
//
// The job's GPT is served under the module structure of a Hugging Face or Megatron architecture
// (`model_class`): the modules, their names, types and registration order that torch's
// printout and module walk show (a decoder layer's attention and MLP and their norms). AutoTP
// reads the model's name from that printout and the layers from that walk, by the rules of the
// DeepSpeed version the job states; its assertions are DeepSpeed's. The computation stays the
// GPT's own, whose row-parallel layers are the attention's output and the MLP's second Linear: a
// plan that names exactly those runs; another plan (AutoTP's for GPT-NeoX before 0.10.0, which
// missed attention.dense) is refused as not modelled.
#pragma once

#include <string>
#include <vector>

namespace fl::infer {

// A module as torch holds it: its attribute name, its class, its kind and its children in
// registration order.
struct Module {
  enum class Kind { kLinear, kLayerNorm, kModuleList, kOther };
  std::string name, type;
  Kind kind = Kind::kOther;
  std::vector<Module> children;
};

// The architectures a job can be served as (workload.infer.model_class).
const std::vector<std::string>& model_classes();
// The whole model of `model_class` with `layers` decoder layers; ConfigError for another class.
Module model_of(const std::string& model_class, int layers);
// ASCII lower case (a model's name read from its printout, a description's type).
std::string lower_ascii(std::string s);
// torch's str(model) (leaf modules without their arguments).
std::string module_repr(const Module& m);

// One entry of the plan: a decoder layer class and the names of its row-parallel Linear layers
// (as DeepSpeed names them: the parent module's attribute, '.', the Linear's).
struct TpPolicy {
  std::string layer_class;
  std::vector<std::string> all_reduce;
};

// AutoTP.tp_parser(model) of DeepSpeed `version` ("" : the newest behaviour modelled). Throws
// ConfigError with DeepSpeed's AssertionError text when it finds no plan.
std::vector<TpPolicy> auto_tp_parser(const Module& model, const std::string& version);

struct InjectionChoice {
  // "megatron" (no init_inference), "kernel", "autotp" or "policy" (a policy given with autotp
  // is a policy, as in DeepSpeed; with kernel it is DeepSpeed's assertion).
  std::string mode;
  std::string model_class = "gpt2";  // the architecture the GPT is served as
  std::vector<std::string> policy;   // injection_policy's names (mode "policy")
  int tp = 1;
  std::string deepspeed_version;
};

// InferenceEngine.__init__'s checkpoint load, which comes before the sharding choice: with kernel
// injection off and a checkpoint description given, DeepSpeed before 0.9.3 (pull request 3102)
// calls _load_checkpoint, where SDLoaderFactory.get_sd_loader_json hands back the description
// itself for the types only kernel injection's loader reads (BLOOM; from 0.7.7 also ds_model),
// and `sd_loader.load(...)` fails with "AttributeError: 'dict' object has no attribute 'load'"
// (deepspeedai/DeepSpeed#2557). Throws CheckpointError so; returns otherwise.
void check_checkpoint_load(const InjectionChoice& c, const std::string& description_type);

// init_inference's choice for the job, as InferenceEngine.__init__ makes it: returns a line that
// says what sharded the model (printed by the worker), or throws ConfigError with DeepSpeed's
// assertion (AutoTP finding no plan, a policy beside kernel injection) or, for a plan the GPT's
// computation is not, a sentence saying so.
std::string choose_injection(const InjectionChoice& c);

}  // namespace fl::infer
