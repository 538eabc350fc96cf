#include "kernels/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/device_arena.hpp"

#if defined(FAULTLINE_HAVE_CUDA)
#include "kernels/cuda/runtime.hpp"
#endif

namespace fl {

Storage::Storage(size_t bytes, MemoryAccountant& acct, std::string_view what)
    : bytes_(bytes), acct_(&acct) {
  if (acct.device().is_cuda()) {
#if defined(FAULTLINE_HAVE_CUDA)
    const int d = acct.device().index;
    data_ = cuda::device_allocate(d, bytes, what, acct);  // charges acct, raises its OOM error
    const cudaError_t e = cudaMemsetAsync(data_, 0, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) {
      cuda::device_free(d, data_, acct);
      cuda::raise_error(e, fmt::format("zeroing '{}'", what));
    }
    return;
#else
    raise<DeviceError>("tensor '{}' on {} but this build has no CUDA", what, acct.device().str());
#endif
  }
  category_ = acct.reserve(bytes, what);
  // 64-byte alignment for vectorised kernels; at least one byte so the pointer is unique.
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  // The device's tensors come from the device arena when there is one (never the host
  // accountant's: offloaded state is the rank's own memory).
  DeviceArena* arena = &acct == &MemoryAccountant::host() ? nullptr : DeviceArena::instance();
  if (arena) {
    data_ = arena->allocate(rounded);
    if (!data_) {
      acct.release(bytes, category_);
      acct.raise_out_of_memory(bytes, what,
                               fmt::format("the device arena ({}) has no free block that large",
                                           format_bytes(arena->size())));
    }
    std::memset(data_, 0, rounded);
    return;
  }
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) {
    acct.release(bytes, category_);
    throw std::bad_alloc();
  }
  std::memset(data_, 0, rounded);
}

Storage::~Storage() {
#if defined(FAULTLINE_HAVE_CUDA)
  if (acct_->device().is_cuda()) {
    cuda::device_free(acct_->device().index, data_, *acct_);
    return;
  }
#endif
  if (DeviceArena* arena = DeviceArena::instance(); arena && arena->owns(data_)) {
    arena->free(data_);
  } else {
    std::free(data_);
  }
  acct_->release(bytes_, category_);
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, std::string_view what,
                     MemoryAccountant& acct) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.bytes(), acct, what);
  return t;
}

size_t Tensor::numel() const {
  size_t n = 1;
  for (auto d : shape_) n *= static_cast<size_t>(d);
  return n;
}

float* Tensor::f32() const {
  if (dtype_ != DType::kF32) {
    raise("tensor of dtype {} used where fp32 is required", dtype_name(dtype_));
  }
  return data<float>();
}

}  // namespace fl
