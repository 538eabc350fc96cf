// workload.grad_norm (docs/workloads.md, "Mixture of experts"): how the global gradient norm that
// clipping divides by is computed. "flat" is faultline's own (one sum of squares over the rank's
// buffers, one all-reduce). The other two are torch.nn.utils.clip_grad_norm_ over DTensor
// gradients, as FSDP2 with expert parallelism (torchtitan's layout) holds them: every parameter
// is a DTensor on a device mesh, the dense ones on the data-parallel mesh and the experts on the
// expert mesh. "dtensor_stack" is clip_grad_norm_ as torch writes it: each parameter's norm is a
// DTensor on its parameter's mesh, and torch.stack of those norms goes through DTensor's sharding
// propagation, which refuses operands on different meshes (pytorch/pytorch#180346).
// "dtensor_per_mesh" is the downstream workaround: each mesh's norm reduced over its own ranks,
// the results combined as plain numbers. Under tensor parallelism FSDP2 puts the tensor-parallel
// shards on the ('dp', 'tp') mesh and the parameters outside the TP plan (replicated across TP
// ranks: layer norms, biases of row-parallel layers, a vocabulary that is not split) on its
// ('dp',) submesh, so a model that is not fully tensor-parallelised has two meshes too
// (pytorch/pytorch#134212, where the optimizer's foreach ops met them first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/model/params.hpp"
#include "workloads/parallel/topology.hpp"

namespace fl::train {

// A torch DeviceMesh as DTensor compares two: its device type, its ranks laid out in a grid
// (row-major) and its dimension names.
struct DeviceMesh {
  std::string device;  // "cpu" or "cuda"
  std::vector<int> shape;
  std::vector<int> ranks;
  std::vector<std::string> names;
  bool operator==(const DeviceMesh&) const = default;
  // As torch prints one: DeviceMesh('cuda', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp')).
  std::string repr() const;
};

// The mesh of the dense parameters of this rank's pipeline stage: ('dp',), or ('dp', 'tp')
// when tp > 1 (the tensor-parallel shards').
DeviceMesh dense_mesh(const parallel::Topology& topo, const std::string& device);
// The ('dp',) submesh of this rank's tensor-parallel index: the parameters outside the TP plan.
DeviceMesh dp_submesh(const parallel::Topology& topo, const std::string& device);
// The dense meshes of `layout`'s parameters in model.parameters() order (a tied head's copy left
// out): each shard on dense_mesh, each replicated parameter on dp_submesh when tp > 1.
std::vector<DeviceMesh> dense_meshes(const model::ParamLayout& layout,
                                     const parallel::Topology& topo, const std::string& device);
// Masks for ops::masked_sum_of_squares over `total` flat elements (1: left out), tp > 1:
// `sharded` keeps the tensor-parallel shards only, `replicated` the replicated parameters only
// (counted on every TP rank); both leave out a tied head's copy.
struct MeshMasks {
  std::vector<uint8_t> sharded, replicated;
};
MeshMasks dense_mesh_masks(const model::ParamLayout& layout, size_t total);
// The mesh of the experts under expert parallelism over `dp` ranks (DeepSpeed's E + D layout,
// consecutive ranks one expert-parallel group): ('edp', 'ep'), shape [dp / ep_size, ep_size].
DeviceMesh expert_mesh(int dp, int ep_size, const std::string& device);

// torch.stack over per-parameter norm DTensors whose meshes are `meshes` (model.parameters()
// order): DTensor's stack strategy raises ValueError at the first mesh that differs from the
// first one, before any collective.
void stack_norms(const std::vector<DeviceMesh>& meshes, int rank);

}  // namespace fl::train
