// Open MPI's start-up on one machine (docs/harness.md, "Launch speed"). By default every MPI
// process probes the fabrics Open MPI was built with — UCX, libfabric (OFI), PSM, InfiniBand
// verbs — before it settles on shared memory and TCP; on this machine that probing made a bare
// MPI_Init take 0.3-1.0 s instead of 0.12 s (mostly waiting, about 6 ms of CPU per process).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fl::harness {

struct Scenario;

// MCA parameters (name, value) the launchers give an MPI-backend run on this machine: pml ob1
// (shared memory, TCP and self), no UCX one-sided component, no openib/ofi transports. Empty for
// runs across topology.hosts (a cluster's fabric is the cluster's choice) and for the NCCL
// backend; a parameter the scenario's env or rank_env sets as OMPI_MCA_NAME is left to it.
std::vector<std::pair<std::string, std::string>> local_mpi_params(const Scenario& s);

}  // namespace fl::harness
