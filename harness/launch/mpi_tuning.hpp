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

// Environment variables (name, value) for the same runs, for mpirun and every MPI process: hwloc's
// topology discovery without its I/O part. Each MPI process (and mpirun) discovers the machine at
// start; by default hwloc also dlopens its PCI, OpenCL, GL and libxml2 plugins (with their
// libraries) and reads every PCI device's config space — on this machine about half of a bare
// MPI_Init's CPU (28 -> 13 ms per process). Open MPI on one machine uses the cores, caches and NUMA
// nodes (binding, locality), which stay; PCI devices only matter for the NIC and GPU transports
// that local_mpi_params already turns off. Same conditions as local_mpi_params; a variable the
// scenario's env or rank_env sets is left to it.
std::vector<std::pair<std::string, std::string>> local_mpi_env(const Scenario& s);

// MCA parameters for ranks the local launcher starts one by one (MPI singletons) when they are
// more than the `cpus` this machine gives the harness: mpi_yield_when_idle 1, so that a rank
// waiting in MPI (its join's accept and connect, a collective) yields the CPU instead of spinning.
// mpirun sets it itself when it sees more ranks than slots; a singleton cannot know, and 32
// singletons on 2 cores spun 0.5-0.6 s of CPU each while they joined (96 ms yielding; the 32-rank
// world ready in 6 s instead of 52-69 s). Same conditions as local_mpi_params.
std::vector<std::pair<std::string, std::string>> singleton_mpi_params(const Scenario& s, int cpus);

// The CPUs this process may run on (sched_getaffinity; 1 when unknown).
int usable_cpus();

}  // namespace fl::harness
