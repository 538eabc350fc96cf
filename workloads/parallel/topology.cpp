#include "workloads/parallel/topology.hpp"

namespace fl::parallel {

Topology build_topology(comm::Communicator& world, model::Layout layout,
                        const model::GptConfig& cfg) {
  layout.world = world.size();
  model::validate(cfg, layout);
  Topology t;
  t.layout = layout;
  t.world = &world;
  t.rank = world.rank();
  t.tp_rank = t.rank % layout.tp;
  t.dp_rank = (t.rank / layout.tp) % layout.dp;
  t.pp_rank = t.rank / (layout.tp * layout.dp);
  t.tp = world.split(t.dp_rank + layout.dp * t.pp_rank, t.tp_rank, "tp");
  t.dp = world.split(t.tp_rank + layout.tp * t.pp_rank, t.dp_rank, "dp");
  t.pp = world.split(t.tp_rank + layout.tp * t.dp_rank, t.pp_rank, "pp");
  return t;
}

}  // namespace fl::parallel
