// MPI backend: host buffers, non-blocking MPI collectives polled by the base class. Device buffers
// (CUDA builds) are staged through host memory, so several ranks can share one GPU.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <vector>

#include "kernels/memory.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/rendezvous/store_client.hpp"

namespace fl::comm {

class ShmTransport;

FAULTLINE_SETTING(kRingMinBytes, int64_t, "FAULTLINE_MPI_RING_MIN_BYTES", 262144,
                  "MPI backend: all-reduces of at least this many bytes use the ring algorithm "
                  "(smaller ones use MPI_Iallreduce)");

// Initialises MPI once per process (MPI_THREAD_FUNNELED: only the training thread calls MPI).
// Finalises at exit unless a communicator was left broken (a pending op would hang finalize).
void mpi_init_once();
int mpi_world_size();
// MPI_Abort(MPI_COMM_WORLD, code) if MPI is initialised and not finalised; else returns.
void mpi_abort_if_running(int code);
int mpi_world_rank();

FAULTLINE_SETTING(kCommDeviceBuffers, bool, "FAULTLINE_COMM_DEVICE_BUFFERS", false,
                  "MPI backend: each group's first collective charges NCCL's connection buffers "
                  "to the device budget (a send and a receive buffer of NCCL_BUFFSIZE, default "
                  "4 MiB, per channel: NCCL_MIN_NCHANNELS, default 2, at most "
                  "NCCL_MAX_NCHANNELS); a budget without room fails it as NCCL does");

// The device bytes NCCL's ring connections of a group take: 2 x NCCL_BUFFSIZE x channels, from
// the environment as NCCL reads it (a value that does not parse is refused, naming it).
size_t nccl_connection_bytes();

class MpiCommunicator final : public Communicator {
 public:
  // The world communicator, reordered so that group rank == `rank` (the rank the launcher gave
  // this process). Fails if MPI's world size differs from `world_size`. Ranks started without
  // mpirun (MPI singletons) join through `store` and an ompi-server (singleton_join.hpp), every
  // wait for a partner within `join_timeout` from the call (the rendezvous deadline).
  static std::unique_ptr<MpiCommunicator> create_world(
      int rank, int world_size, CommOptions options = {}, rdzv::StoreClient* store = nullptr,
      std::chrono::milliseconds join_timeout = std::chrono::milliseconds(30000));
  ~MpiCommunicator() override;

  std::string_view backend() const override { return "mpi"; }
  MPI_Comm raw() const { return comm_; }

 protected:
  std::unique_ptr<PendingOp> start_all_reduce(Buffer buf, ReduceOp op) override;
  std::unique_ptr<PendingOp> start_reduce_scatter(const Buffer& in, Buffer out,
                                                  ReduceOp op) override;
  std::unique_ptr<PendingOp> start_all_gather(const Buffer& in, Buffer out) override;
  std::unique_ptr<PendingOp> start_broadcast(Buffer buf, int root) override;
  std::unique_ptr<PendingOp> start_send(const Buffer& buf, int peer, int tag) override;
  std::unique_ptr<PendingOp> start_recv(Buffer buf, int peer, int tag) override;
  std::unique_ptr<PendingOp> start_barrier() override;
  std::unique_ptr<PendingOp> start_all_to_all(const Buffer& in, Buffer out) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                         const std::vector<int32_t>& colors_keys) override;
  void on_timeout() override;

 private:
  MpiCommunicator(MPI_Comm comm, std::string group, int world_rank,
                  std::shared_ptr<FlightRecorder> recorder, CommOptions options);
  MPI_Comm comm_;
  std::vector<char> ring_scratch_;
  std::unique_ptr<ShmTransport> shm_;  // intra-node shared memory (shm_transport.hpp), if on
  bool shm_checked_ = false;
  // NCCL's connection buffers (FAULTLINE_COMM_DEVICE_BUFFERS): charged at the group's first
  // collective to the device accountant of its buffer, released with the communicator.
  void connect_buffers(const Buffer& buf);
  bool buffers_checked_ = false;
  size_t buffer_bytes_ = 0;
  MemoryAccountant* buffer_acct_ = nullptr;
  bool leaked_ = false;  // a timed-out op may still reference the comm: never free it
  // MPI_Comm_create_group's tag for this communicator's next split (kDataTag and kVerifyTag are
  // the collective layer's point-to-point tags; the splits' stay clear of them).
  static constexpr int kSplitTagBase = 1000;
  static constexpr int kSplitTags = 1000;
  int splits_ = 0;
};

}  // namespace fl::comm
