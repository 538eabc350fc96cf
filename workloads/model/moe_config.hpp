// The Mixture-of-Experts options of the GPT model (docs/workloads.md#mixture-of-experts): which
// blocks replace their MLP by a router and N expert MLPs, how tokens are routed (top-1 or top-2
// with a capacity, as DeepSpeed's top1gating/top2gating, or Mixtral's dropless loop), and over how
// many data-parallel ranks the experts are split (expert parallelism).
#pragma once

namespace fl::model {

struct MoeConfig {
  int experts = 0;  // 0: every block is dense
  int top_k = 1;    // 1 or 2
  // Ranks that split the experts between them (DeepSpeed's ep_size): consecutive data-parallel
  // ranks form an expert-parallel group and exchange tokens with an all-to-all; the ranks holding
  // the same experts form the expert-data-parallel group their gradients are reduced over.
  int ep_size = 1;
  float capacity_factor = 1.0f;  // capacity = ceil(tokens / experts x factor (x2 for top-2))
  int min_capacity = 4;
  // false: the capacity is the largest expert load, the maximum all-reduced over the EP group.
  bool drop_tokens = true;
  // Blocks whose 1-based number is a multiple of this are MoE (Megatron-DeepSpeed's
  // --expert-interval): 1 every block, 2 every other one.
  int interval = 1;
  float aux_loss_coef = 0.01f;  // weight of the load-balancing loss in the objective
  // Mixtral's sparse block (transformers' MixtralSparseMoeBlock): no capacity, every routed token
  // computed, an expert that receives no token skipped; experts replicated (ep_size 1).
  bool dropless = false;
  // ZeRO-3: the MoE block is a leaf module (deepspeed.utils.set_z3_leaf_modules): its forward
  // and backward gather every expert at once instead of each expert as it is used.
  bool z3_leaf = false;
  // The gate knows its expert-parallel group (DeepSpeed's _set_ep_group, called by
  // set_deepspeed_parallelism when deepspeed.initialize wraps the model). false: as a model used
  // without it, drop_tokens false takes each rank's own largest load as the capacity (no max
  // all-reduce), so the ranks' all-to-all buffers differ in size.
  bool gate_ep_group = true;

  bool enabled() const { return experts > 0; }
  // Whether block `l` (0-based) is an MoE block.
  bool is_moe_layer(int l) const { return enabled() && (l + 1) % interval == 0; }
  bool operator==(const MoeConfig&) const = default;
};

struct GptConfig;
struct Layout;
// ConfigError naming the workload.moe option and what is allowed (DeepSpeed's words where it has
// them: "Number of experts (E) should be divisible by expert parallel size (ep)").
void validate_moe(const GptConfig& m, const Layout& l);

}  // namespace fl::model
