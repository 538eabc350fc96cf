// Rank layout and communication groups for DP × TP × PP. Ranks are ordered tensor-parallel
// fastest, then data-parallel, then pipeline stage (Megatron's default order), so a TP group is
// consecutive ranks — on real hardware, the ranks that share a node.
#pragma once

#include <memory>

#include "workloads/comm/communicator.hpp"
#include "workloads/model/config.hpp"

namespace fl::parallel {

struct Topology {
  model::Layout layout;
  int rank = 0;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  comm::Communicator* world = nullptr;
  std::unique_ptr<comm::Communicator> dp, tp, pp;

  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == layout.pp - 1; }
  // World rank of (dp, tp, pp) coordinates.
  int rank_of(int dp_r, int tp_r, int pp_r) const {
    return tp_r + layout.tp * (dp_r + layout.dp * pp_r);
  }
};

// Validates the layout against the world and splits the world into its groups (collective).
Topology build_topology(comm::Communicator& world, model::Layout layout,
                        const model::GptConfig& cfg);

}  // namespace fl::parallel
