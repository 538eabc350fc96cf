#include "workloads/parallel/expert.hpp"

#include <vector>

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace fl::parallel {

ExpertGroups build_expert_groups(Topology& topo, int ep_size) {
  ExpertGroups g;
  const int d = topo.dp_rank;
  g.ep_rank = d % ep_size;
  g.edp_rank = d / ep_size;
  // Colors over the world (tp and pp are 1 under MoE: world rank = dp rank).
  g.ep = topo.world->split(d / ep_size, g.ep_rank, "ep");
  g.edp = topo.world->split(d % ep_size, g.edp_rank, "edp");
  return g;
}

void check_moe_training(bool uses_checkpoints) {
  if (uses_checkpoints) {
    raise<ConfigError>(
        "workload.moe: checkpoints and model files of MoE models are not implemented (each EP "
        "rank holds its own experts); allowed: an MoE run without workload.checkpoint, "
        "--save-dir, --resume or a model file");
  }
}

namespace {

ZeroConfig expert_zero_config(ZeroConfig z) {
  // The experts are a model of their own: default buckets, and under stage 3 no prefetch (a
  // rank gathers an expert when its block uses it).
  z.reduce_bucket_bytes = 0;
  z.allgather_bucket_bytes = 0;
  z.prefetch_bytes = z.stage == 3 ? 0 : -1;
  z.max_live_bytes = -1;
  return z;
}

}  // namespace

ExpertParallel::ExpertParallel(const model::GptConfig& cfg, ZeroConfig z, Topology& topo,
                               MemoryAccountant& device, MemoryAccountant& host,
                               MemoryAccountant& staging)
    : groups_(build_expert_groups(topo, cfg.moe.ep_size)),
      layout_(model::ParamLayout::experts(cfg, cfg.moe.ep_size, groups_.ep_rank)) {
  edp_size_ = groups_.edp->size();
  edp_topo_.layout = topo.layout;
  edp_topo_.layout.dp = edp_size_;
  edp_topo_.rank = topo.rank;
  edp_topo_.dp_rank = groups_.edp_rank;
  edp_topo_.world = topo.world;
  edp_topo_.dp = std::move(groups_.edp);
  zero_ = std::make_unique<ZeroEngine>(expert_zero_config(z), layout_, edp_topo_, device, host,
                                       staging);
  layer_ = std::make_unique<model::MoeLayer>(cfg, layout_, *zero_, groups_.ep.get(), device);
}

void ExpertParallel::finish_gradients() {
  zero_->finish_gradients();
  zero_->drop_gathered();
}

std::pair<bool, double> ExpertParallel::judge(float loss_scale, int divided_by) {
  bool overflow = false;
  double sq = 0;
  for (size_t c = 0; c < zero_->owned_chunks(); ++c) {
    const FlatSpan owned = zero_->owned_grads(c);
    if (ops::has_non_finite(owned.data, owned.size())) overflow = true;
    sq += ops::masked_sum_of_squares(owned.data, nullptr, owned.size(), loss_scale);
  }
  // Every rank of an EDP group judges the same gradients when they are not partitioned: each
  // counts 1/edp of them; the trainer's division by `divided_by` is undone.
  if (zero_->judges_all_grads()) return {overflow, sq * divided_by / edp_size_};
  return {overflow, sq * divided_by};
}

void ExpertParallel::update(float grad_scale,
                            const std::function<void(const ZeroEngine::Update&)>& apply) {
  for (size_t c = 0; c < zero_->owned_chunks(); ++c) {
    const FlatSpan owned = zero_->owned_grads(c);
    ops::scale(owned.data, owned.size(), grad_scale);
    const ZeroEngine::Update u = zero_->begin_update(c);
    DeviceGuard on(u.device);
    apply(u);
  }
}

}  // namespace fl::parallel
