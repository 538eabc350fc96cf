// workload.grad_norm and the trainer's judgement of a step's gradients (grad_norm.hpp).
#include "workloads/train/grad_norm.hpp"

#include <fmt/format.h>

#include <cmath>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

namespace {

// One dimension's nested list, from `at` in the row-major ranks.
std::string nested(const DeviceMesh& m, size_t dim, size_t& at) {
  std::string s = "[";
  for (int i = 0; i < m.shape[dim]; ++i) {
    if (i > 0) s += ", ";
    if (dim + 1 == m.shape.size()) {
      s += std::to_string(m.ranks[at++]);
    } else {
      s += nested(m, dim + 1, at);
    }
  }
  return s + "]";
}

}  // namespace

std::string DeviceMesh::repr() const {
  size_t at = 0;
  std::string dims;
  for (size_t i = 0; i < names.size(); ++i) {
    dims += fmt::format("{}'{}'", i > 0 ? ", " : "", names[i]);
  }
  if (names.size() == 1) dims += ",";
  return fmt::format("DeviceMesh('{}', {}, mesh_dim_names=({}))", device, nested(*this, 0, at),
                     dims);
}

DeviceMesh dense_mesh(const parallel::Topology& topo, const std::string& device) {
  const auto& l = topo.layout;
  DeviceMesh m{device, {l.dp}, {}, {"dp"}};
  if (l.tp > 1) {
    m.shape.push_back(l.tp);
    m.names.push_back("tp");
  }
  for (int d = 0; d < l.dp; ++d) {
    for (int t = 0; t < l.tp; ++t) m.ranks.push_back(topo.rank_of(d, t, topo.pp_rank));
  }
  return m;
}

DeviceMesh dp_submesh(const parallel::Topology& topo, const std::string& device) {
  DeviceMesh m{device, {topo.layout.dp}, {}, {"dp"}};
  for (int d = 0; d < topo.layout.dp; ++d)
    m.ranks.push_back(topo.rank_of(d, topo.tp_rank, topo.pp_rank));
  return m;
}

std::vector<DeviceMesh> dense_meshes(const model::ParamLayout& layout,
                                     const parallel::Topology& topo, const std::string& device) {
  const DeviceMesh shards = dense_mesh(topo, device);
  const DeviceMesh replicated = topo.layout.tp > 1 ? dp_submesh(topo, device) : shards;
  std::vector<DeviceMesh> out;
  for (const auto& s : layout.specs()) {
    if (s.shared) continue;
    out.push_back(s.split == model::Split::kReplicated ? replicated : shards);
  }
  return out;
}

MeshMasks dense_mesh_masks(const model::ParamLayout& layout, size_t total) {
  MeshMasks m{std::vector<uint8_t>(total, 1), std::vector<uint8_t>(total, 1)};
  for (const auto& s : layout.specs()) {
    if (s.shared) continue;
    auto& keep = s.split == model::Split::kReplicated ? m.replicated : m.sharded;
    std::fill_n(keep.begin() + static_cast<long>(s.offset), s.numel(), 0);
  }
  return m;
}

DeviceMesh expert_mesh(int dp, int ep_size, const std::string& device) {
  DeviceMesh m{device, {dp / ep_size, ep_size}, {}, {"edp", "ep"}};
  for (int r = 0; r < dp; ++r) m.ranks.push_back(r);  // edp index r / ep, ep index r % ep
  return m;
}

void stack_norms(const std::vector<DeviceMesh>& meshes, int rank) {
  for (const auto& m : meshes) {
    if (m == meshes.front()) continue;
    raise(
        "ValueError: All operands in aten.stack.default must have the same mesh, but got {} and "
        "{}. (rank {}: torch.nn.utils.clip_grad_norm_ stacks each parameter's gradient norm, a "
        "DTensor on its parameter's mesh, and this model's parameters are on more than one)",
        m.repr(), meshes.front().repr(), rank);
  }
}

// The trainer's judgement of a step's gradients (overflow and the global norm), as
// workload.grad_norm computes the norm.
Trainer::GradJudgement Trainer::judge_gradients(float scale) {
  GradJudgement j;
  // DeepSpeed's ZeRO optimizer runs Muon's update on the whole reduced gradients before it cuts
  // the partitions (fp32 stage 1: every gradient is owned), and the norm and the clip then see
  // the updates; without a ZeRO optimizer (stage 0) or with its CPU offload (whose partitions
  // skip get_flat_partition) MuonWithAuxAdam.step() takes the gradients as they are (muon.hpp).
  if (muon_ && topo_.layout.zero >= 1 && !cfg_.offload_optimizer) {
    const parallel::FlatSpan all = zero_->owned_grads(0);
    muon_->orthogonalise(all.data, all.lo, all.hi - all.lo);
  }
  for (size_t c = 0; c < zero_->owned_chunks(); ++c) {
    const parallel::FlatSpan owned = zero_->owned_grads(c);
    const size_t n = owned.hi - owned.lo;
    // Where the mask leaves nothing out it is not read (no mask: n bytes fewer a chunk).
    const uint8_t* skip =
        norm_sees_every_element_ ? nullptr : replicated_.data<uint8_t>() + owned.lo;
    const double sq = ops::masked_sum_of_squares(owned.data, skip, n, scale);
    // (x / scale)² of a finite float is finite in double, and squares never cancel: where the sum
    // sees every element it is the overflow check (one pass and one read-back a chunk fewer: on
    // a GPU, a host sync per reduce bucket).
    if (norm_sees_every_element_ ? !std::isfinite(sq) : ops::has_non_finite(owned.data, n)) {
      j.overflow = 1;
    }
    j.dense_sq += sq;
    if (sharded_mask_.defined()) {
      j.sharded_sq += ops::masked_sum_of_squares(
          owned.data, sharded_mask_.data<uint8_t>() + owned.lo, n, scale);
      j.replicated_sq += ops::masked_sum_of_squares(
          owned.data, replicated_only_mask_.data<uint8_t>() + owned.lo, n, scale);
    }
  }
  if (experts_) {
    // The experts' gradients, chunk by chunk in their own engine, join the same judgement.
    const auto [expert_overflow, expert_sq] =
        experts_->judge(scale, zero_->judges_all_grads() ? topo_.layout.dp : 1);
    if (expert_overflow) j.overflow = 1;
    j.expert_sq = expert_sq;
  }
  // The script's torch.nn.utils.clip_grad_norm_ over DTensor gradients stacks the parameters'
  // norms first: a model with expert parallelism has two meshes, which DTensor refuses there
  // (experts on every rank, ep_size 1, are sharded on the data-parallel mesh like the rest).
  if (cfg_.grad_clip > 0 && cfg_.grad_norm == "dtensor_stack") {
    const std::string device = acct_.device().is_cuda() ? "cuda" : "cpu";
    std::vector<DeviceMesh> meshes = dense_meshes(layout_, topo_, device);
    if (expert_parallel()) {
      meshes.push_back(expert_mesh(topo_.layout.dp, cfg_.model.moe.ep_size, device));
    }
    stack_norms(meshes, topo_.rank);
  }
  return j;
}

double Trainer::global_sq_norm(const GradJudgement& j) {
  using comm::host_buffer;
  const int dp = topo_.layout.dp;
  // A sum all-reduced over `over` (the world by default), each replica's copy counted once.
  auto reduced = [&](double sq, comm::Communicator* over = nullptr) {
    (over ? *over : *topo_.world).all_reduce(host_buffer(&sq, 1, DType::kF64));
    return zero_->judges_all_grads() ? sq / dp : sq;
  };
  // Each mesh's norm over its own ranks, combined as plain numbers (the workaround for
  // dtensor_stack). Under MoE tp and pp are 1, so both the data-parallel mesh and the expert
  // mesh span the world.
  if (expert_parallel() && cfg_.grad_norm == "dtensor_per_mesh") {
    return reduced(j.dense_sq) + reduced(j.expert_sq);
  }
  // Under tp > 1 (pp 1): the shards' sum over the ('dp', 'tp') mesh, the world; the replicated
  // parameters' over the ('dp',) submesh, this rank's data-parallel group.
  if (sharded_mask_.defined())
    return reduced(j.sharded_sq) + reduced(j.replicated_sq, topo_.dp.get());
  return reduced(j.dense_sq + j.expert_sq);
}

}  // namespace fl::train
