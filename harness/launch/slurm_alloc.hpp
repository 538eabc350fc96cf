// The Slurm allocation a run with `launcher: srun` runs in (docs/cluster.md): its nodes, in the
// order Slurm lists them (SLURM_JOB_NODELIST expanded by `scontrol show hostnames`), and where a
// scenario's logical topology.hosts land on them. Checked before anything is started. Also what
// the srun launcher's job step gets: the ranks' MPI environment and its multi-program file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fl::harness {

struct Scenario;

struct SlurmAllocation {
  std::string job;                 // SLURM_JOB_ID
  std::vector<std::string> nodes;  // the allocation's nodes, in Slurm's order
  // With topology.hosts: the hosts and host k's node (nodes[k]); both empty without hosts.
  std::vector<std::string> hosts, host_nodes;
  // The names the run's agents register as, one per node they run on: the logical hosts, or
  // (without hosts) every node of the allocation.
  std::vector<std::string> agent_names() const;
  // The node each agent runs on (agent_names()[k] runs on agent_nodes()[k]).
  std::vector<std::string> agent_nodes() const;
  // host -> node, for the history.
  std::map<std::string, std::string> mapping() const;
};

// Node names from a hostlist expression (SLURM_JOB_NODELIST's form, "n[1-3,7],gpu2"), expanded by
// `scontrol show hostnames` (exec, no shell); Error when scontrol fails or prints nothing.
std::vector<std::string> expand_nodelist(const std::string& list);

// Host k of `hosts` on node k of `nodes`, in order; Error naming both counts when the allocation
// has fewer nodes than the topology has hosts.
std::vector<std::string> map_hosts_to_nodes(const std::vector<std::string>& hosts,
                                            const std::vector<std::string>& nodes);

// A node's IPv4 address as this machine resolves its name (where rank 0's store listens when
// topology.hosts name no address); Error naming the node when it does not resolve.
std::string node_address(const std::string& node);

// The allocation this process runs in, checked for the scenario: srun and scontrol on PATH,
// SLURM_JOB_ID and a node list set, enough tasks (SLURM_NTASKS) for the ranks and enough nodes
// for topology.hosts. Error (the run's exit 2) naming what is missing; nothing is started.
SlurmAllocation check_srun_allocation(const Scenario& s);

// Variables (name, value) launcher srun gives every rank through srun's own environment, for an
// MPI-backend run in allocation `a`, whose nodes each give the ranks `cpus` CPUs:
// - all ranks on one node (one node, no topology.hosts): Open MPI's settings for one machine, as
//   mpirun's (mpi_tuning.hpp: pml ob1, no UCX, openib or OFI probing as OMPI_MCA_*, hwloc without
//   its I/O discovery);
// - more ranks on a node than its CPUs (ranks spread evenly over the nodes, or over the hosts):
//   OMPI_MCA_mpi_yield_when_idle=1, so that a rank waiting in MPI yields its CPU. mpirun sets that
//   itself when it oversubscribes; under srun's direct launch nothing does, and ranks spinning in
//   MPI_Init's fence and the first barrier on 2 CPUs took 1.9x (32 ranks) and 2.7x (128 ranks) as
//   long to be ready (docs/harness.md).
// A variable the scenario's env or rank_env sets is left to it; nothing for the NCCL backend.
std::vector<std::pair<std::string, std::string>> srun_mpi_env(const Scenario& s,
                                                              const SlurmAllocation& a, int cpus);

// srun's multi-program file (--multi-prog) for `lines[r]`, rank r's program and arguments (words
// joined by single spaces, without the task column). Ranks whose lines differ only in their own
// number share one line with a task range, the number written as %t, which slurmstepd replaces
// with each task's rank ("0-127 env -C RUN/ranks/rank%t RANK=%t ... fl-train ..."): srun refuses
// a file over 60000 bytes, which one line per rank passed at about 64 ranks. Error naming the
// rank when a line holds '%' (slurmstepd would replace %t and %o in it), has more than 127 words
// or 16382 characters (what slurmstepd reads of a line), or when the file is still over 60000.
std::string srun_multi_prog(const std::vector<std::string>& lines);

// launcher mpirun inside an allocation: when topology.hosts are all nodes of the allocation this
// process runs in (SLURM_JOB_ID, SLURM_JOB_NODELIST; srun and scontrol on PATH) and the scenario
// names no rsh agent, the allocation with each host on its own node; else nothing (the hosts are
// then reached through the rsh agent, ssh by default, as outside Slurm). Error when scontrol
// cannot expand the node list.
std::optional<SlurmAllocation> mpirun_allocation(const Scenario& s);

}  // namespace fl::harness
