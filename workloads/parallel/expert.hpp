// Expert parallelism for the MoE blocks (DeepSpeed's E + D layout, deepspeed/utils/groups.py):
// consecutive data-parallel ranks form an expert-parallel (EP) group that splits the experts and
// exchanges tokens with an all-to-all; the ranks that hold the same experts (every ep_size-th
// data-parallel rank) form the expert-data-parallel (EDP) group. The experts' parameters live in
// their own flat layout with their own ZeRO engine over the EDP group: ZeRO partitions them over
// the EDP group, gathers (stage 3) only this rank's experts, and reduces their gradients over the
// EDP group, never over the whole data-parallel group.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "workloads/model/moe.hpp"
#include "workloads/parallel/topology.hpp"
#include "workloads/parallel/zero.hpp"

namespace fl::parallel {

// The EP and EDP groups of a rank (collective over topo.world: two splits).
struct ExpertGroups {
  int ep_rank = 0, edp_rank = 0;
  std::unique_ptr<comm::Communicator> ep, edp;
};
ExpertGroups build_expert_groups(Topology& topo, int ep_size);
// ConfigError when an MoE run asks for checkpoints or model files (not implemented for experts).
void check_moe_training(bool uses_checkpoints);

class ExpertParallel {
 public:
  // `z`: the trainer's ZeRO configuration (stage, precision, optimizer state, seed).
  ExpertParallel(const model::GptConfig& cfg, ZeroConfig z, Topology& topo,
                 MemoryAccountant& device, MemoryAccountant& host, MemoryAccountant& staging);

  model::MoeLayer& layer() { return *layer_; }
  ZeroEngine& zero() { return *zero_; }
  const model::ParamLayout& layout() const { return layout_; }

  // The trainer's step, for the expert parameters: gradients zeroed, reduced over the EDP group,
  // judged (overflow, squared norm) and updated by `apply` with the trainer's optimizer, one
  // owned_grads chunk at a time as the dense engine's (fp16/bf16: fp32 copies of a reduce bucket).
  void begin_step() { zero_->begin_step(); }
  void finish_gradients();
  // workload.grad_sync micro_batch: the EDP group's all-reduce after a micro-batch, as the dense
  // engine's.
  void all_reduce_gradients() { zero_->all_reduce_gradients(); }
  // Whether the owned expert gradients hold a non-finite value, and this rank's share of their
  // squared norm (divided by loss_scale^2) such that the world's sum, divided by `divided_by`
  // (the trainer's divisor of its own sum), counts each expert element once.
  std::pair<bool, double> judge(float loss_scale, int divided_by);
  // Each chunk's gradients multiplied by grad_scale, then `apply` on its update.
  void update(float grad_scale, const std::function<void(const ZeroEngine::Update&)>& apply);
  void finish_update() { zero_->finish_update(); }
  void end_step() { zero_->end_step(); }

 private:
  Topology edp_topo_;  // the ZeRO engine's view: its "data-parallel" group is the EDP group
  ExpertGroups groups_;
  model::ParamLayout layout_;
  std::unique_ptr<ZeroEngine> zero_;
  std::unique_ptr<model::MoeLayer> layer_;
  int edp_size_ = 1;
};

}  // namespace fl::parallel
