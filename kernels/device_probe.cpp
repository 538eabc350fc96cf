// How many CUDA devices this process sees, in a library of its own: the harness asks it before a
// GPU scenario runs without linking the kernels (whose fault sites would then count as this
// binary's own).
#include "kernels/device.hpp"

#if defined(FAULTLINE_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace fl {

int cuda_device_count() {
#if defined(FAULTLINE_HAVE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

int cuda_compute_capability(int device) {
#if defined(FAULTLINE_HAVE_CUDA)
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
#else
  (void)device;
  return 0;
#endif
}

bool built_with_cuda() {
#if defined(FAULTLINE_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace fl
