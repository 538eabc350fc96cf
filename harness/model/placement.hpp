// Which node each rank runs on, as the launchers place the ranks: they fill the nodes in order,
// ranks / nodes on each. mpirun gets it as --host H:SLOTS and one --host per app-file line
// (process/hosts.cpp), srun as its arbitrary distribution's host list (launch/launch_srun.cpp),
// the namespaces as one network namespace per node (faults/sandbox.cpp); with topology.hosts the
// hosts are the nodes. Everything that needs a rank's node or host (faults, agents, launchers)
// asks here instead of dividing on its own.
#pragma once

#include <algorithm>

#include "harness/model/scenario.hpp"

namespace fl::harness {

// Ranks on each of `nodes` nodes (at least 1).
inline int ranks_per_node(int ranks, int nodes) {
  return std::max(1, ranks / std::max(1, nodes));
}

// The node (0 .. nodes-1) that holds `rank` of `ranks`; -1 for rank -1 (every rank).
inline int node_of_rank(int ranks, int nodes, int rank) {
  if (rank < 0) return -1;
  return std::min(rank / ranks_per_node(ranks, nodes), std::max(1, nodes) - 1);
}
inline int node_of_rank(const Topology& t, int rank) {
  return node_of_rank(t.ranks, t.nodes, rank);
}

// With topology.hosts: the index of the host that holds `rank`; -1 without hosts (this machine
// only, or Slurm's own placement) or for rank -1.
inline int host_of_rank(const Topology& t, int rank) {
  if (t.hosts.empty()) return -1;
  return node_of_rank(t.ranks, static_cast<int>(t.hosts.size()), rank);
}

}  // namespace fl::harness
