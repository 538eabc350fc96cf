#include "workloads/comm/device_copy.hpp"

#include <cstring>

#include "kernels/device.hpp"
#include "workloads/comm/errors.hpp"

#if defined(FAULTLINE_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace fl::comm {

Buffer device_buffer(void* data, size_t count, DType dtype) {
  const fl::Device d = current_device();
  return Buffer{data, count, dtype, d.is_cuda() ? Device::kCuda : Device::kCpu, d.index};
}

#if defined(FAULTLINE_HAVE_CUDA)
namespace {
void cuda_check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess) {
    raise<CommError>("CUDA error during {} on device {}: {} ({})", what, device,
                     cudaGetErrorString(e), cudaGetErrorName(e));
  }
}
}  // namespace

void copy_to_host(void* host, const Buffer& src) {
  if (src.device == Device::kCpu) {
    std::memcpy(host, src.data, src.bytes());
    return;
  }
  cuda_check(cudaSetDevice(src.device_id), "cudaSetDevice", src.device_id);
  cuda_check(cudaMemcpy(host, src.data, src.bytes(), cudaMemcpyDeviceToHost),
             "staging copy device->host", src.device_id);
}

void copy_from_host(const Buffer& dst, const void* host) {
  if (dst.device == Device::kCpu) {
    std::memcpy(dst.data, host, dst.bytes());
    return;
  }
  cuda_check(cudaSetDevice(dst.device_id), "cudaSetDevice", dst.device_id);
  cuda_check(cudaMemcpy(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice),
             "staging copy host->device", dst.device_id);
}

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#else
void copy_to_host(void* host, const Buffer& src) {
  if (src.device != Device::kCpu) {
    raise<CommError>(
        "buffer is on device cuda:{} but this build has no CUDA "
        "(configure with FAULTLINE_CUDA=ON)",
        src.device_id);
  }
  std::memcpy(host, src.data, src.bytes());
}

void copy_from_host(const Buffer& dst, const void* host) {
  if (dst.device != Device::kCpu) {
    raise<CommError>("buffer is on device cuda:{} but this build has no CUDA", dst.device_id);
  }
  std::memcpy(dst.data, host, dst.bytes());
}

bool cuda_available() {
  return false;
}
#endif

}  // namespace fl::comm
