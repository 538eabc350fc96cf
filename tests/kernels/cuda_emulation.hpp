// A CPU emulation of the CUDA execution model, just enough to compile kernels/cuda/kernels.cu as
// C++ and run its kernels on host memory: every thread of a block is an OS thread; __syncthreads
// is a barrier of the block, warp shuffles and __syncwarp a barrier of the warp (threads that
// return early drop out of both); blocks run one after another, so static (__shared__) storage is
// the block's shared memory. fp16/bf16 conversions use the project's round-to-nearest-even ones.
// It checks the kernels' indexing, reductions and synchronisation — not timing, not the hardware's
// intrinsics.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/dtype.hpp"

#define FL_CUDA_EMULATION 1

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

struct Block {
  explicit Block(unsigned threads) : sync(threads), warps((threads + 31) / 32), slots(threads) {
    for (unsigned w = 0; w < warps.size(); ++w) {
      const unsigned lanes = std::min(32u, threads - 32 * w);
      warps[w] = std::make_unique<std::barrier<>>(lanes);
    }
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<double> slots;  // one shuffle slot per thread
};

inline thread_local dim3 t_thread, t_block, t_block_dim, t_grid_dim;
inline thread_local Block* t_current = nullptr;
inline std::vector<unsigned char> g_dynamic_shared;

inline unsigned linear_thread() {
  return t_thread.x + t_block_dim.x * (t_thread.y + t_block_dim.y * t_thread.z);
}

template <class T>
T shuffle_xor(T v, int offset) {
  Block& b = *t_current;
  const unsigned me = linear_thread(), warp = me / 32;
  b.slots[me] = static_cast<double>(v);
  b.warps[warp]->arrive_and_wait();
  const T r = static_cast<T>(b.slots[(me & ~31u) | ((me & 31u) ^ static_cast<unsigned>(offset))]);
  b.warps[warp]->arrive_and_wait();
  return r;
}

template <class... P, class... A>
void run_grid(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, A... args) {
  g_dynamic_shared.assign(shared, 0);
  const unsigned threads = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b(threads);
        std::vector<std::thread> ts;
        ts.reserve(threads);
        for (unsigned i = 0; i < threads; ++i) {
          ts.emplace_back([&, i] {
            t_thread = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
            t_block = dim3(bx, by, bz);
            t_block_dim = block;
            t_grid_dim = grid;
            t_current = &b;
            kernel(static_cast<P>(args)...);
            // A thread that has returned no longer takes part in its block's barriers.
            b.warps[i / 32]->arrive_and_drop();
            b.sync.arrive_and_drop();
          });
        }
        for (auto& t : ts) t.join();
      }
    }
  }
}

template <class K>
struct Launch {
  K kernel;
  dim3 grid, block;
  size_t shared;
  template <class... A>
  void operator()(A... args) const {
    run_grid(kernel, grid, block, shared, args...);
  }
};

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

}  // namespace emu

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (::emu::t_thread)
#define blockIdx (::emu::t_block)
#define blockDim (::emu::t_block_dim)
#define gridDim (::emu::t_grid_dim)
#define FL_LAUNCH(kernel, grid, block, shared) \
  (::emu::Launch<decltype(&kernel)>{&kernel, dim3(grid), dim3(block), static_cast<size_t>(shared)})
#define FL_DYNAMIC_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::emu::g_dynamic_shared.data())

inline void __syncthreads() {
  emu::t_current->sync.arrive_and_wait();
}
inline void __syncwarp() {
  emu::t_current->warps[emu::linear_thread() / 32]->arrive_and_wait();
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  return emu::shuffle_xor(v, offset);
}
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}

using __half = emu::Half;
using __nv_bfloat16 = emu::BFloat16;
inline __half __float2half_rn(float f) {
  return {fl::float_to_half(f)};
}
inline float __half2float(__half h) {
  return fl::half_to_float(h.bits);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return {fl::float_to_bf16(f)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  return fl::bf16_to_float(b.bits);
}

using std::isfinite;
using std::max;
using std::min;
