// The CUDA runtime of a rank: binding a device, turning CUDA and cuBLAS errors into CudaError
// (rank, device, op, error name and text; sticky errors say that the rank must end), the caching
// allocator of each device and the cuBLAS handle. Host code (C++20), compiled only with CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <string_view>

#include "kernels/caching_allocator.hpp"
#include "kernels/cuda/cublas_lazy.hpp"
#include "kernels/device.hpp"

namespace fl::cuda {

// Pure functions of an error code (usable without a device).
bool is_sticky(int code);
std::string error_message(int code, std::string_view op, int rank, int device);

[[noreturn]] void raise_error(cudaError_t e, std::string_view op);
inline void check(cudaError_t e, std::string_view op) {
  if (e != cudaSuccess) raise_error(e, op);
}
void check_blas(cublasStatus_t s, std::string_view op);

int device_count();
// Binds the calling thread to `device`: DeviceError when none is visible or the ordinal is out of
// range, CudaError when the device cannot be used.
void activate(int device);
int current_index();
cublasHandle_t blas();  // the current device's handle (legacy default stream, fp32 math)

CachingAllocator& allocator(int device);
void* device_allocate(int device, size_t bytes, std::string_view what, MemoryAccountant& acct);
void device_free(int device, void* p, MemoryAccountant& acct);

// A temporary device buffer from the caching allocator, charged to the device's accountant.
class Scratch {
 public:
  Scratch(size_t bytes, std::string_view what);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  int device_;
  void* p_;
};

}  // namespace fl::cuda
