// Internal to the MPI backend (mpi_*.cpp): errors, datatypes and the 16-bit reductions, the host
// staging of device buffers, the pending-op wrapper, and the ring all-reduce.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "workloads/comm/communicator.hpp"
#include "workloads/comm/device_copy.hpp"

namespace fl::comm::mpi {

// Set once an op timed out: a pending MPI request would hang MPI_Finalize, so it is skipped.
extern std::atomic<bool> g_dirty;

void check(int rc, const char* call, const std::string& group, int world_rank);
MPI_Datatype type_of(DType t);
// The reduction for (op, dtype): fp16 and bf16 by user-defined ops in fp32; avg reduces as sum.
MPI_Op op_of(ReduceOp op, DType t);
// The 16-bit reduction function itself (the ring reduces chunks with it).
MPI_User_function* reduce16_fn(DType t, ReduceOp op);
// avg: the sum divided by the group size, in the buffer's own type.
void divide_in_place(void* data, size_t n, DType t, int by);
// n as an MPI count; CommError above INT_MAX elements.
int checked_count(size_t n, const char* what);

// Host memory an op works on: the user's buffer itself, or a staging copy of a device buffer.
class HostView {
 public:
  HostView(const Buffer& user, bool load) : user_(user) {
    if (user.device == Device::kCpu) {
      host_ = user.data;
    } else {
      storage_.resize(user.bytes());
      host_ = storage_.data();
      if (load) copy_to_host(host_, user);
    }
  }
  void* data() const { return host_; }
  void store_back() const {
    if (user_.device != Device::kCpu) copy_from_host(user_, host_);
  }

 private:
  Buffer user_;
  void* host_ = nullptr;
  std::vector<std::byte> storage_;
};

class MpiPending final : public PendingOp {
 public:
  MpiPending(std::string group, int world_rank) : group_(std::move(group)), rank_(world_rank) {}
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test", group_, rank_);
    if (!flag) return false;
    done_ = true;
    if (finish_) finish_();
    return true;
  }
  MPI_Request* request() { return &req_; }
  void on_finish(std::function<void()> f) { finish_ = std::move(f); }
  std::vector<std::unique_ptr<HostView>> views;

 private:
  std::string group_;
  int rank_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
  std::function<void()> finish_;
};

// dst = dst (op) src over n elements of type t (the ring's and the shm transport's reduction).
void accumulate_any(void* dst, const void* src, size_t n, DType t, ReduceOp op);

// The ring all-reduce over `data` (see mpi_ring.cpp); `on_finish` runs once it completes.
std::unique_ptr<PendingOp> ring_all_reduce(MPI_Comm comm, int rank, int size, void* data,
                                           size_t count, DType t, ReduceOp op, std::string group,
                                           int world_rank, std::vector<char>& scratch,
                                           std::function<void()> on_finish);

}  // namespace fl::comm::mpi
