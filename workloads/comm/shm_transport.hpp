// The MPI backend's intra-node shared-memory transport, built the way NCCL's SHM transport is:
// every rank of a group whose members share a node creates one segment in /dev/shm
// (shm_open + ftruncate + mmap, FAULTLINE_SHM_BUFFER_BYTES each, like NCCL_BUFFSIZE), the peers
// map each other's, and the names are unlinked once everyone has mapped them. By default nothing
// is written at creation: a segment's pages are touched only when data passes through them, in
// FIFO order (each op writes at the segment's head, which wraps), so a /dev/shm too small for the
// segments is not an error at start but a SIGBUS in the middle of a collective, on the first page
// the tmpfs cannot back — as the bus errors in containers with Docker's 64 MiB /dev/shm.
// FAULTLINE_SHM_ALLOCATE=reserve backs the whole segment at creation instead (posix_fallocate,
// as NCCL's shared-memory code does), so the same /dev/shm fails the transport's set-up, before
// any data moves, with ENOSPC (and, under the pytorch log dialect, NCCL's last warning).
//
// All-reduce through it: each rank copies its chunk into its segment, a barrier, each rank
// reduces all segments in rank order into its buffer (so every rank gets bitwise the same
// result), a barrier before the FIFO space is reused. Opt in with FAULTLINE_SHM_TRANSPORT=1;
// NCCL_SHM_DISABLE=1 turns it off again (the usual workaround), as does a group spread over
// nodes (it then uses the network path).
//
// FAULTLINE_SHM_P2P=1 signals the way NCCL's P2P transport does between GPUs of one node: a
// rank still writes its chunk into its own segment, but instead of the first barrier it writes a
// ready flag (the chunk's sequence number) straight into every peer's segment, and a rank reduces
// once every peer's flag has reached its own. NCCL_P2P_DISABLE=1 turns that off (the barrier
// path, as NCCL falls back to SHM). FAULTLINE_PCIE_ACS=1 says the node's PCIe switches have
// Access Control Services on: peer-to-peer writes are redirected to the root complex and, with
// the IOMMU in the way, never reach the peer. It is built as the loss it is: peers' segments are
// mapped copy-on-write (MAP_PRIVATE), so a flag written into a peer's segment lands in a private
// copy and the peer waits for it until the collective's deadline (NCCL/nccl#631's hang; the
// barrier path only reads peers' memory and is unaffected).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "base/settings.hpp"
#include "workloads/comm/communicator.hpp"

namespace fl::comm {

FAULTLINE_SETTING(kShmTransport, bool, "FAULTLINE_SHM_TRANSPORT", false,
                  "MPI backend: all-reduces within a node go through shared-memory segments in "
                  "/dev/shm (NCCL's SHM transport); NCCL_SHM_DISABLE=1 turns it off");
FAULTLINE_SETTING(kShmBufferBytes, int64_t, "FAULTLINE_SHM_BUFFER_BYTES", 4 << 20,
                  "Size of each rank's shared-memory segment per group (NCCL_BUFFSIZE)");
FAULTLINE_SETTING(kShmAllocate, std::string, "FAULTLINE_SHM_ALLOCATE", "sparse",
                  "How a shared-memory segment is sized: sparse (ftruncate: pages are charged when "
                  "touched, a full /dev/shm is a SIGBUS mid-collective) or reserve "
                  "(posix_fallocate, as NCCL: a full /dev/shm fails the set-up)");

FAULTLINE_SETTING(kShmP2p, bool, "FAULTLINE_SHM_P2P", false,
                  "MPI backend's shared-memory transport: ready flags are written into the peers' "
                  "segments (NCCL's P2P transport) instead of a barrier; NCCL_P2P_DISABLE=1 turns "
                  "it off");
FAULTLINE_SETTING(kPcieAcs, bool, "FAULTLINE_PCIE_ACS", false,
                  "The node's PCIe switches have ACS on: peer-to-peer writes never reach the peer "
                  "(peers' segments are mapped copy-on-write), so FAULTLINE_SHM_P2P's flags are "
                  "lost and the collective hangs");

class ShmTransport {
 public:
  // Null when the transport is off or does not apply (one rank, members on several nodes).
  // Collective over `comm` (blocking): every member must call it. Throws CommError when a
  // segment cannot be created or mapped.
  static std::unique_ptr<ShmTransport> create(MPI_Comm comm, int rank, int size,
                                              const std::string& group, int world_rank);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  // In place on host memory; `describe` names the op for the bus-error report.
  std::unique_ptr<PendingOp> all_reduce(void* data, size_t count, DType t, ReduceOp op,
                                        std::string describe, std::function<void()> on_finish);
  size_t segment_bytes() const { return bytes_; }

 private:
  ShmTransport() = default;
  friend class ShmAllReduce;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0, world_rank_ = 0;
  std::string group_;
  size_t bytes_ = 0;
  // FIFO bytes: the segment, less its last page in P2P mode (the peers' ready flags, one
  // uint64_t per member).
  size_t data_bytes_ = 0;
  bool p2p_ = false;
  uint64_t seq_ = 0;                // chunks posted, the same on every member
  size_t head_ = 0;                 // FIFO write position, the same on every member
  std::vector<char*> segs_;         // every member's segment, mapped here
  std::vector<std::string> names_;  // /dev/shm names, for messages
};

}  // namespace fl::comm
