#include "kernels/cuda/fill.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fl::cuda {

namespace {
__global__ void fill_affine_kernel(float* dst, size_t n, float base, float scale) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = base + scale * static_cast<float>(i);
}

__global__ void mismatch_kernel(const float* src, size_t n, float base, float scale, float tol,
                                unsigned long long* out) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n && fabsf(src[i] - (base + scale * static_cast<float>(i))) > tol) atomicAdd(out, 1ull);
}

__global__ void store_kernel(float* p) {
  *p = 1.0f;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
}
}  // namespace

void fill_affine(float* dst, size_t n, float base, float scale) {
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  fill_affine_kernel<<<blocks, 256>>>(dst, n, base, scale);
  check(cudaGetLastError(), "fill_affine launch");
  check(cudaDeviceSynchronize(), "fill_affine");
}

size_t count_mismatches(const float* src, size_t n, float base, float scale, float tol) {
  unsigned long long* d = nullptr;
  check(cudaMalloc(&d, sizeof(*d)), "cudaMalloc");
  check(cudaMemset(d, 0, sizeof(*d)), "cudaMemset");
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  mismatch_kernel<<<blocks, 256>>>(src, n, base, scale, tol, d);
  unsigned long long h = 0;
  check(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d);
  return static_cast<size_t>(h);
}

void store_through(float* p) {
  store_kernel<<<1, 1>>>(p);
  check(cudaGetLastError(), "store_through launch");
}

}  // namespace fl::cuda
