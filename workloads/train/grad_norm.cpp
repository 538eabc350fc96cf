#include "workloads/train/grad_norm.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

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

}  // namespace fl::train
