// Vocabulary of the collective layer: buffers, reduction ops, op kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/dtype.hpp"

namespace fl::comm {

enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2, kMin = 3 };

enum class OpKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kSend = 4,
  kRecv = 5,
  kBarrier = 6,
  kSplit = 7,
  kAllToAll = 8,
};

enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

// A view of memory the op reads or writes; the communicator never owns it.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int device_id = 0;

  size_t bytes() const { return count * dtype_size(dtype); }
};

template <class T>
Buffer host_buffer(T* data, size_t count, DType dtype) {
  return Buffer{static_cast<void*>(data), count, dtype, Device::kCpu, 0};
}

// A buffer on the calling thread's current compute device (host memory on CPU ranks), for data
// the model and trainer keep on their device.
Buffer device_buffer(void* data, size_t count, DType dtype);

constexpr std::string_view op_name(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSplit:
      return "split";
    case OpKind::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

constexpr std::string_view reduce_name(ReduceOp r) {
  switch (r) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

constexpr bool is_collective(OpKind k) {
  return k != OpKind::kSend && k != OpKind::kRecv;
}

}  // namespace fl::comm
