// Worker start-up: read the launcher's environment, serve or reach the rendezvous store, check
// the world, then build the world communicator of the chosen backend.
#pragma once

#include <memory>
#include <string>

#include "kernels/device.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"
#include "workloads/rendezvous/world_check.hpp"

namespace fl::comm {

FAULTLINE_SETTING(kStoreHost, std::string, "FAULTLINE_STORE_HOST", "rank0",
                  "Who serves the rendezvous store: rank0 (rank 0 of the job) or external "
                  "(the harness)");
FAULTLINE_SETTING(kStoreListenFd, int64_t, "FAULTLINE_STORE_LISTEN_FD", -1,
                  "Rank 0 serves the store on this listening socket, which its launcher bound "
                  "(fl-launch, as torchrun's agent); -1: rank 0 binds MASTER_PORT itself");
FAULTLINE_SETTING(kRendezvousTimeoutMs, int64_t, "FAULTLINE_RDZV_TIMEOUT_MS", 30000,
                  "How long a rank waits for the whole world at start");
FAULTLINE_SETTING(kRunId, std::string, "FAULTLINE_RUN_ID", "local", "Run id every rank must share");
FAULTLINE_SETTING(kParentDeathSignal, bool, "FAULTLINE_PDEATHSIG", false,
                  "Die with the parent process (the harness sets it for every rank)");
FAULTLINE_SETTING(kBackend, std::string, "FAULTLINE_BACKEND", "mpi", "Data plane: mpi or nccl");
FAULTLINE_SETTING(kGpuMap, std::string, "FAULTLINE_GPU_MAP", "",
                  "Which GPU a rank binds: exclusive (GPU = LOCAL_RANK, the default with nccl) or "
                  "shared (LOCAL_RANK modulo the visible GPUs, the default with mpi)");

struct WorkerIdentity {
  int rank = -1;
  int world_size = 0;
  int local_rank = 0;
  int node_rank = 0;  // NODE_RANK (or OMPI_COMM_WORLD_NODE_RANK); targets of node= fault filters
  std::string run_id;
  std::string master_addr;
  int master_port = 0;
};

// RANK / WORLD_SIZE / LOCAL_RANK, falling back to what mpirun sets (OMPI_COMM_WORLD_*). A missing
// or malformed variable is an error naming it.
WorkerIdentity identity_from_env();

// The device a rank binds to: the LOCAL_RANK-th of the node's visible devices, as
// torch.cuda.set_device(local_rank) does. CPU ranks simulate a node's devices:
// FAULTLINE_DEVICES_PER_NODE of them (default LOCAL_WORLD_SIZE), narrowed by
// FAULTLINE_VISIBLE_DEVICES ("0,1"; the CUDA_VISIBLE_DEVICES of CPU ranks). A local rank without
// a device is a DeviceError ("invalid device ordinal").
int select_device(const WorkerIdentity& id);

// The GPU a rank binds (see FAULTLINE_GPU_MAP). With exclusive mapping a LOCAL_RANK beyond the
// visible GPUs is an invalid device ordinal when the rank binds it; with shared mapping several
// ranks use one GPU, which the MPI backend supports (device buffers are staged through the host)
// and NCCL refuses ("Duplicate GPU detected").
int gpu_for_rank(const WorkerIdentity& id, const std::string& backend);

struct Bootstrap {
  WorkerIdentity id;
  int device = 0;
  fl::Device compute;  // where the rank computes (its thread's current device)
  std::unique_ptr<rdzv::StoreServer> server;  // set on the rank that serves the store
  std::unique_ptr<rdzv::StoreClient> store;
  rdzv::World world;
  std::unique_ptr<Communicator> comm;
  std::shared_ptr<class CollectiveWatch> collective_watch;  // what leaves the rank about its ops
  double world_cpu_ms = 0;  // this process's CPU time in forming the world (MPI or NCCL)
};

// This process's CPU time so far (user + system, all threads), in milliseconds. The `hello` and
// `layout` events carry it, so a launch's cost per rank can be read from the history
// (bench/harness_launch.sh).
double process_cpu_ms();

// Starts this rank's telemetry (FAULTLINE_EVENTS_FILE, FAULTLINE_CONTROL_ADDR), says hello, and
// reports fault firings and control-plane fault commands. bootstrap_worker calls it.
void start_worker_telemetry(const WorkerIdentity& id, const std::string& backend);

// `config_hash` identifies the workload configuration; ranks with different hashes refuse to run
// together. `backend` is "mpi" or "nccl". `compute` is "cpu" or "cuda" (empty: FAULTLINE_DEVICE);
// a CUDA rank binds its GPU before it joins the world.
Bootstrap bootstrap_worker(const std::string& config_hash, const std::string& backend,
                           const std::string& compute = "");

// The end of a worker that finished its work: a barrier on the world (with the comm deadline) so
// that no rank tears MPI down while a peer still needs it. Throws CommTimeoutError if a peer
// never arrives; MPI is then left unfinalised instead of blocking in MPI_Finalize.
void finish_worker(Bootstrap& b);

}  // namespace fl::comm
