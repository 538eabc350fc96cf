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
  size_t head_ = 0;                 // FIFO write position, the same on every member
  std::vector<char*> segs_;         // every member's segment, mapped here
  std::vector<std::string> names_;  // /dev/shm names, for messages
};

}  // namespace fl::comm
