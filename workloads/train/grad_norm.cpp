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
        "DTensor on its parameter's mesh; the dense parameters and the experts are on different "
        "meshes)",
        m.repr(), meshes.front().repr(), rank);
  }
}

}  // namespace fl::train
