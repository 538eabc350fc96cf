// NCCL backend: device buffers, a non-blocking communicator (config.blocking = 0), completion by
// cudaStreamQuery, async errors by ncclCommGetAsyncError, and ncclCommAbort on timeout — the same
// watchdog shape PyTorch uses. Host buffers are staged through a device scratch buffer.
#pragma once

#include <memory>
#include <string>

#include "workloads/comm/communicator.hpp"

namespace fl::rdzv {
class StoreClient;
}

namespace fl::comm {

// One rank per GPU. The unique id is published by rank 0 through the rendezvous store under
// "nccl/<run>/world/id" and read by the others with the store's deadline.
std::unique_ptr<Communicator> create_nccl_world(int rank, int world_size, int device,
                                                rdzv::StoreClient& store, CommOptions options = {});

}  // namespace fl::comm
