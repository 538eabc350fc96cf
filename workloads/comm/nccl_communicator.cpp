#include "workloads/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "workloads/comm/nccl_error.hpp"
#include "workloads/rendezvous/store_client.hpp"

namespace fl::comm {

namespace {

void cuda_check(cudaError_t e, const char* what, int rank, int device) {
  if (e != cudaSuccess) {
    raise<CommError>("[rank {}] CUDA error in {} on device {}: {} ({})", rank, what, device,
                     cudaGetErrorString(e), cudaGetErrorName(e));
  }
}

// nccl_result_name numbers the codes as nccl.h does.
static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
              ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
              ncclRemoteError == 6 && ncclInProgress == 7);

std::string nccl_text(ncclComm_t comm, ncclResult_t r) {
  return nccl_error_text(static_cast<int>(r), comm);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
    case DType::kF64:
      return ncclFloat64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, int rank) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kAvg:
      if (t == DType::kI32 || t == DType::kI64 || t == DType::kU8) {
        raise<CommError>("[rank {}] NCCL has no average for integer type {}; use sum", rank,
                         dtype_name(t));
      }
      return ncclAvg;
  }
  return ncclSum;
}

// Waits for a non-blocking NCCL call (init, split) to leave ncclInProgress.
void wait_ready(ncclComm_t comm, std::chrono::milliseconds timeout, const char* what, int rank) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) raise<CommError>("[rank {}] {}: {}", rank, what, nccl_text(comm, r));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      // The text first: the abort frees the communicator and may record warnings of its own.
      std::string text = nccl_text(comm, state);
      ncclCommAbort(comm);
      raise<CommError>("[rank {}] {} failed: {}", rank, what, text);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(comm);
      raise<CommError>("[rank {}] {} did not finish within {} ms", rank, what, timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class NcclCommunicator;

class NcclPending final : public PendingOp {
 public:
  NcclPending(ncclComm_t comm, cudaStream_t stream, int rank, int device)
      : comm_(comm), stream_(stream), rank_(rank), device_(device) {}
  bool test() override {
    if (done_) return true;
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      raise<CommError>("[rank {}] NCCL async error on device {}: {}", rank_, device_,
                       nccl_text(comm_, r != ncclSuccess ? r : state));
    }
    if (state == ncclInProgress) return false;  // still enqueueing (non-blocking communicator)
    cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaStreamQuery", rank_, device_);
    done_ = true;
    if (finish_) finish_();
    return true;
  }
  void on_finish(std::function<void()> f) { finish_ = std::move(f); }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_;
  int device_;
  bool done_ = false;
  std::function<void()> finish_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::string group, int rank, int size, int world_rank,
                   int device, std::shared_ptr<FlightRecorder> recorder, CommOptions options)
      : Communicator(std::move(group), rank, size, world_rank, std::move(recorder),
                     std::move(options)),
        comm_(comm),
        device_(device) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice", world_rank, device_);
    // A blocking stream: it is ordered after the kernels the rank queued on the legacy default
    // stream (its compute stream), so a collective on device buffers reads finished gradients,
    // and later compute waits for the collective.
    cuda_check(cudaStreamCreate(&stream_), "cudaStreamCreate", world_rank, device_);
  }
  ~NcclCommunicator() override {
    if (!aborted_) ncclCommFinalize(comm_), ncclCommDestroy(comm_);
    if (scratch_) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }
  std::string_view backend() const override { return "nccl"; }

 protected:
  std::unique_ptr<PendingOp> start_all_reduce(Buffer buf, ReduceOp op) override {
    ensure_scratch(host_bytes(buf));
    Staged s = stage(buf, 0, true);
    check(ncclAllReduce(s.dev, s.dev, buf.count, nccl_type(buf.dtype),
                        nccl_op(op, buf.dtype, world_rank()), comm_, stream_),
          "ncclAllReduce");
    return finish(buf, s);
  }
  std::unique_ptr<PendingOp> start_reduce_scatter(const Buffer& in, Buffer out,
                                                  ReduceOp op) override {
    ensure_scratch(host_bytes(in) + host_bytes(out));
    Staged si = stage(in, 0, true);
    Staged so = stage(out, host_bytes(in), false);
    check(ncclReduceScatter(si.dev, so.dev, out.count, nccl_type(in.dtype),
                            nccl_op(op, in.dtype, world_rank()), comm_, stream_),
          "ncclReduceScatter");
    return finish(out, so);
  }
  std::unique_ptr<PendingOp> start_all_gather(const Buffer& in, Buffer out) override {
    ensure_scratch(host_bytes(in) + host_bytes(out));
    Staged si = stage(in, 0, true);
    Staged so = stage(out, host_bytes(in), false);
    check(ncclAllGather(si.dev, so.dev, in.count, nccl_type(in.dtype), comm_, stream_),
          "ncclAllGather");
    return finish(out, so);
  }
  std::unique_ptr<PendingOp> start_all_to_all(const Buffer& in, Buffer out) override {
    // torch's all_to_all_single on NCCL: one send and one receive per peer in a group.
    ensure_scratch(host_bytes(in) + host_bytes(out));
    Staged si = stage(in, 0, true);
    Staged so = stage(out, host_bytes(in), false);
    const size_t block = in.count / static_cast<size_t>(size());
    const size_t bytes = block * dtype_size(in.dtype);
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      const size_t off = static_cast<size_t>(r) * bytes;
      check(
          ncclSend(static_cast<char*>(si.dev) + off, block, nccl_type(in.dtype), r, comm_, stream_),
          "ncclSend");
      check(
          ncclRecv(static_cast<char*>(so.dev) + off, block, nccl_type(in.dtype), r, comm_, stream_),
          "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    return finish(out, so);
  }
  std::unique_ptr<PendingOp> start_broadcast(Buffer buf, int root) override {
    ensure_scratch(host_bytes(buf));
    Staged s = stage(buf, 0, rank() == root);
    check(ncclBroadcast(s.dev, s.dev, buf.count, nccl_type(buf.dtype), root, comm_, stream_),
          "ncclBroadcast");
    return finish(buf, s);
  }
  std::unique_ptr<PendingOp> start_send(const Buffer& buf, int peer, int) override {
    ensure_scratch(host_bytes(buf));
    Staged s = stage(buf, 0, true);
    check(ncclSend(s.dev, buf.count, nccl_type(buf.dtype), peer, comm_, stream_), "ncclSend");
    return finish(Buffer{}, Staged{});
  }
  std::unique_ptr<PendingOp> start_recv(Buffer buf, int peer, int) override {
    ensure_scratch(host_bytes(buf));
    Staged s = stage(buf, 0, false);
    check(ncclRecv(s.dev, buf.count, nccl_type(buf.dtype), peer, comm_, stream_), "ncclRecv");
    return finish(buf, s);
  }
  std::unique_ptr<PendingOp> start_barrier() override {
    ensure_scratch(sizeof(float));
    check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_),
          "ncclAllReduce(barrier)");
    return finish(Buffer{}, Staged{});
  }
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                         const std::vector<int32_t>& /*colors_keys*/) override {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = nullptr;
    ncclResult_t r =
        ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      raise<CommError>("[rank {}] ncclCommSplit of group '{}': {}", world_rank(), group(),
                       nccl_text(comm_, r));
    }
    wait_ready(comm_, options().timeout, "ncclCommSplit", world_rank());
    if (child == nullptr) return nullptr;
    wait_ready(child, options().timeout, "ncclCommSplit (child)", world_rank());
    int crank = 0;
    int csize = 0;
    ncclCommUserRank(child, &crank);
    ncclCommCount(child, &csize);
    return std::make_unique<NcclCommunicator>(child, name, crank, csize, world_rank(), device_,
                                              shared_recorder(), options());
  }
  void on_timeout() override {
    ncclCommAbort(comm_);
    aborted_ = true;
  }

 private:
  struct Staged {
    void* dev = nullptr;
    bool staged = false;
  };

  void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess && r != ncclInProgress) {
      raise<CommError>("[rank {}] {} on group '{}' (device {}): {}", world_rank(), call, group(),
                       device_, nccl_text(comm_, r));
    }
  }
  static size_t host_bytes(const Buffer& b) {
    // Rounded up so a second region starts aligned.
    return b.device == Device::kCuda ? 0 : (b.bytes() + 255) / 256 * 256;
  }
  // Ops run one at a time (each is waited for), so growing the scratch buffer between ops is safe.
  void ensure_scratch(size_t bytes) {
    if (bytes == 0 || bytes <= scratch_bytes_) return;
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    cuda_check(cudaMalloc(&scratch_, bytes), "cudaMalloc(staging)", world_rank(), device_);
    scratch_bytes_ = bytes;
  }
  // Device memory for `b`: the buffer itself, or a region of the scratch buffer at `offset`.
  Staged stage(const Buffer& b, size_t offset, bool load) {
    if (b.device == Device::kCuda) return {b.data, false};
    void* dev = static_cast<char*>(scratch_) + offset;
    if (load) {
      cuda_check(cudaMemcpyAsync(dev, b.data, b.bytes(), cudaMemcpyHostToDevice, stream_),
                 "staging copy host->device", world_rank(), device_);
    }
    return {dev, true};
  }
  std::unique_ptr<PendingOp> finish(Buffer user, Staged s) {
    if (s.staged) {
      cuda_check(cudaMemcpyAsync(user.data, s.dev, user.bytes(), cudaMemcpyDeviceToHost, stream_),
                 "staging copy device->host", world_rank(), device_);
    }
    return std::make_unique<NcclPending>(comm_, stream_, world_rank(), device_);
  }

  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  bool aborted_ = false;
};

}  // namespace

std::string nccl_error_text(int result, void* comm) {
  int version = 0;
  std::string v;
  if (ncclGetVersion(&version) == ncclSuccess) {
    v = fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
  }
  // ncclGetLastError: the text of NCCL's last WARN in this process (comm may be null).
  const char* last = ncclGetLastError(static_cast<ncclComm_t>(comm));
  return format_nccl_error(result, ncclGetErrorString(static_cast<ncclResult_t>(result)),
                           last != nullptr ? last : "", v);
}

std::unique_ptr<Communicator> create_nccl_world(int rank, int world_size, int device,
                                                rdzv::StoreClient& store, CommOptions options) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice", rank, device);
  ncclUniqueId id;
  const std::string key = "nccl/world/unique_id";
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) raise<CommError>("[rank 0] ncclGetUniqueId: {}", nccl_text(nullptr, r));
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    std::string v = store.get(key);
    if (v.size() != sizeof(id)) {
      raise<CommError>("[rank {}] NCCL unique id in the store has {} bytes, expected {}", rank,
                       v.size(), sizeof(id));
    }
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    raise<CommError>("[rank {}] ncclCommInitRankConfig (world size {}, device {}): {}", rank,
                     world_size, device, nccl_text(comm, r));
  }
  wait_ready(comm, options.timeout, "ncclCommInitRankConfig", rank);
  auto recorder = std::make_shared<FlightRecorder>(static_cast<size_t>(kFlightRecorderSize.get()));
  return std::make_unique<NcclCommunicator>(comm, "world", rank, world_size, rank, device,
                                            std::move(recorder), std::move(options));
}

}  // namespace fl::comm
