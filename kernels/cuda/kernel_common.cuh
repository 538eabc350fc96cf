// What the CUDA kernel files (kernels.cu, numerics.cu) share: the launch and shared-memory
// macros (which the CPU emulation of tests/kernels/cuda_emulation.hpp defines its own way), the
// block size, grid helpers and warp/block reductions. Included once per .cu file; the emulation
// test includes both files into one translation unit.
#pragma once

#if !defined(FL_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// A kernel launch: FL_LAUNCH(kernel, grid, block, shared bytes)(arguments). The CPU emulation of
// tests/kernels/cuda_emulation.hpp (which compiles this file as C++ to check the kernels' logic
// against the CPU ops on machines without a GPU) defines its own, and its own dynamic shared
// memory.
// Shared memory is declared through FL_SHARED_ARRAY and FL_DYNAMIC_SHARED, which the emulation
// turns into bounds-checked arrays (an out-of-bounds access fails the CPU test, as memcheck does).
#define FL_LAUNCH(kernel, grid, block, shared) kernel<<<(grid), (block), (shared)>>>
#define FL_SHARED_ARRAY(type, name, count) __shared__ type name[count]
#define FL_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#include <algorithm>

#include "kernels/cuda/launch.hpp"

namespace fl::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

unsigned blocks_for(size_t n) {  // at least one block: an empty launch is a launch error
  return static_cast<unsigned>(
      std::max<size_t>(1, std::min<size_t>((n + kThreads - 1) / kThreads, 1u << 16)));
}
unsigned blocks_for_rows(int rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (kThreads threads); every thread gets the result.
__device__ double block_sum(double v) {
  FL_SHARED_ARRAY(double, part, kWarpsPerBlock);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kWarpsPerBlock; ++w) total += part[w];
  __syncthreads();
  return total;
}

#define FL_GRID_STRIDE(i, n)                                                           \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// The row this warp handles, or -1.
__device__ __forceinline__ int warp_row(int rows) {
  const int r = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  return r < rows ? r : -1;
}

}  // namespace
}  // namespace fl::cuda::launch
