// A CPU emulation of the CUDA execution model, just enough to compile kernels/cuda/kernels.cu as
// C++ and run its kernels on host memory: every thread of a block is a fiber (ucontext) with its
// own stack, all run by the calling thread; __syncthreads is a barrier of the block, warp shuffles
// and __syncwarp a barrier of the warp (threads that return early drop out of both). A fiber runs
// until it reaches a barrier or returns; a barrier opens when every live thread it waits for has
// arrived, and threads waiting at barriers that can never open (a __syncthreads some threads skip)
// fail the launch with emu::DeadlockError instead of hanging. Blocks run one after another, so
// static storage is the block's shared memory. (One OS thread per CUDA thread worked too, but
// 256 threads meeting at barriers on a 2-core machine made the tests take minutes.) Shared memory
// is bounds-checked as compute-sanitizer's memcheck does on a GPU: kernels declare it with
// FL_SHARED_ARRAY / FL_DYNAMIC_SHARED (a bare __shared__ does not compile here), every element
// access goes through a checked reference, and a launch in which any thread read or wrote outside
// its array throws emu::SharedMemoryError naming the kernel, block, thread, array, index and size
// (the test fails). fp16/bf16 conversions use the project's round-to-nearest-even ones. It checks
// the kernels' indexing, reductions, synchronisation and shared-memory bounds — not timing, not the
// hardware's intrinsics.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define FL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FL_EMU_ASAN 1
#endif
#endif
#ifdef FL_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include "base/dtype.hpp"

#define FL_CUDA_EMULATION 1

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

// Where a thread of the running block stands.
enum class State { ready, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  ucontext_t ctx{};
  State state = State::ready;
  dim3 thread;
};

// The running block: its threads as fibers, the scheduler's context, the shuffle slots.
struct Block {
  std::vector<Fiber> fibers;
  std::vector<double> slots;  // one shuffle slot per thread
  ucontext_t scheduler{};
  unsigned current = 0;
  std::function<void()> body;             // the kernel with its arguments
  const void* scheduler_stack = nullptr;  // for AddressSanitizer's fiber annotations
  size_t scheduler_stack_size = 0;
};

// Threads waiting at barriers that cannot open: the kernel would hang on a GPU.
class DeadlockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Stacks of the fibers, kept from launch to launch (untouched pages cost nothing).
constexpr size_t kFiberStack = 128 * 1024;
struct Stacks {
  std::unique_ptr<char[]> memory;
  size_t count = 0;
  char* of(unsigned i) { return memory.get() + static_cast<size_t>(i) * kFiberStack; }
  void reserve(unsigned n) {
    if (n <= count) return;
    memory.reset(new char[static_cast<size_t>(n) * kFiberStack]);
    count = n;
  }
};
inline Stacks g_stacks;

// AddressSanitizer has to be told when execution moves to another stack.
inline void switch_begin([[maybe_unused]] void** fake_stack, [[maybe_unused]] const void* bottom,
                         [[maybe_unused]] size_t size) {
#ifdef FL_EMU_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
inline void switch_end([[maybe_unused]] void* fake_stack, [[maybe_unused]] const void** bottom,
                       [[maybe_unused]] size_t* size) {
#ifdef FL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

inline thread_local dim3 t_thread, t_block, t_block_dim, t_grid_dim;
inline thread_local Block* t_current = nullptr;
inline std::vector<unsigned char> g_dynamic_shared;

inline unsigned linear_thread() {
  return t_thread.x + t_block_dim.x * (t_thread.y + t_block_dim.y * t_thread.z);
}

// An out-of-bounds shared-memory access in a launch (thrown once the grid has finished).
class SharedMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The out-of-bounds accesses of the running launch: how many, and the first few in words.
struct SharedViolations {
  std::mutex mu;
  const char* kernel = "";
  size_t count = 0;
  std::string first;
};
inline SharedViolations g_violations;

inline void report_out_of_bounds(const char* array, long long index, size_t count, size_t elem,
                                 const char* what, bool write) {
  const std::string msg =
      std::string(g_violations.kernel) + ": block (" + std::to_string(t_block.x) + "," +
      std::to_string(t_block.y) + "," + std::to_string(t_block.z) + ") thread (" +
      std::to_string(t_thread.x) + "," + std::to_string(t_thread.y) + "," +
      std::to_string(t_thread.z) + ") " + (write ? "writes " : "reads ") + array + "[" +
      std::to_string(index) + "], out of bounds of its " + std::to_string(count) + " elements (" +
      std::to_string(count * elem) + " bytes of " + what + " shared memory)";
  std::lock_guard<std::mutex> lock(g_violations.mu);
  if (g_violations.count++ < 4) g_violations.first += "\n  " + msg;
}

// One element of a shared array, checked when it is read or written.
template <class T>
class SharedRef {
 public:
  SharedRef(T* base, long long index, size_t count, const char* array, const char* what)
      : base_(base), index_(index), count_(count), array_(array), what_(what) {}
  operator T() const {  // NOLINT(google-explicit-constructor): reads as the element
    return in_bounds(false) ? base_[index_] : T{};
  }
  SharedRef& operator=(T v) {
    if (in_bounds(true)) base_[index_] = v;
    return *this;
  }
  SharedRef& operator=(const SharedRef& o) { return *this = static_cast<T>(o); }
  SharedRef& operator+=(T v) { return *this = static_cast<T>(*this) + v; }
  SharedRef& operator-=(T v) { return *this = static_cast<T>(*this) - v; }
  SharedRef& operator*=(T v) { return *this = static_cast<T>(*this) * v; }
  SharedRef& operator/=(T v) { return *this = static_cast<T>(*this) / v; }

 private:
  bool in_bounds(bool write) const {
    if (index_ >= 0 && static_cast<size_t>(index_) < count_) return true;
    report_out_of_bounds(array_, index_, count_, sizeof(T), what_, write);
    return false;
  }
  T* base_;
  long long index_;
  size_t count_;
  const char* array_;
  const char* what_;
};

// A statically sized shared array (FL_SHARED_ARRAY), static storage: the block's shared memory.
template <class T, size_t N>
class SharedArray {
 public:
  explicit SharedArray(const char* name) : name_(name) {}
  SharedRef<T> operator[](long long i) { return {data_, i, N, name_, "static"}; }

 private:
  T data_[N] = {};
  const char* name_;
};

// The running thread waits at a barrier: back to the scheduler until the barrier opens.
inline void wait_at(State barrier) {
  Block& b = *t_current;
  Fiber& f = b.fibers[b.current];
  f.state = barrier;
  void* fake_stack = nullptr;
  switch_begin(&fake_stack, b.scheduler_stack, b.scheduler_stack_size);
  swapcontext(&f.ctx, &b.scheduler);
  switch_end(fake_stack, &b.scheduler_stack, &b.scheduler_stack_size);
}

template <class T>
T shuffle_xor(T v, int offset) {
  Block& b = *t_current;
  const unsigned me = linear_thread();
  b.slots[me] = static_cast<double>(v);
  wait_at(State::at_warp_barrier);
  const T r = static_cast<T>(b.slots[(me & ~31u) | ((me & 31u) ^ static_cast<unsigned>(offset))]);
  wait_at(State::at_warp_barrier);
  return r;
}

// A fiber's entry: the kernel, then back to the scheduler (uc_link) for good.
inline void fiber_main() {
  Block& b = *t_current;
  switch_end(nullptr, &b.scheduler_stack, &b.scheduler_stack_size);
  b.body();
  b.fibers[b.current].state = State::done;
  switch_begin(nullptr, b.scheduler_stack, b.scheduler_stack_size);
}

inline void resume(Block& b, unsigned i) {
  b.current = i;
  t_thread = b.fibers[i].thread;
  void* fake_stack = nullptr;
  switch_begin(&fake_stack, g_stacks.of(i), kFiberStack);
  swapcontext(&b.scheduler, &b.fibers[i].ctx);
  switch_end(fake_stack, nullptr, nullptr);
}

// Runs one block to the end: every ready fiber until it waits or returns, then opens the
// barriers whose threads have all arrived (a warp's when its live lanes all wait at it, the
// block's when every live thread does), until every thread has returned.
inline void run_block(Block& b, const char* kernel) {
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g_stacks.of(i);
    f.ctx.uc_stack.ss_size = kFiberStack;
    f.ctx.uc_link = &b.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
    f.state = State::ready;
  }
  for (;;) {
    for (unsigned i = 0; i < n; ++i) {
      if (b.fibers[i].state == State::ready) resume(b, i);
    }
    bool live = false, opened = false, all_at_block = true;
    for (unsigned w = 0; w * 32 < n; ++w) {
      bool any = false, all_at_warp = true;
      for (unsigned i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
        const State st = b.fibers[i].state;
        if (st == State::done) continue;
        any = live = true;
        all_at_warp = all_at_warp && st == State::at_warp_barrier;
        all_at_block = all_at_block && st == State::at_block_barrier;
      }
      if (any && all_at_warp) {
        for (unsigned i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
          if (b.fibers[i].state != State::done) b.fibers[i].state = State::ready;
        }
        opened = true;
      }
    }
    if (!live) return;
    if (opened) continue;
    if (all_at_block) {
      for (auto& f : b.fibers) {
        if (f.state != State::done) f.state = State::ready;
      }
      continue;
    }
    unsigned at_block = 0, at_warp = 0, done = 0;
    for (const auto& f : b.fibers) {
      at_block += f.state == State::at_block_barrier;
      at_warp += f.state == State::at_warp_barrier;
      done += f.state == State::done;
    }
    throw DeadlockError(std::string(kernel) + ": block (" + std::to_string(t_block.x) + "," +
                        std::to_string(t_block.y) + "," + std::to_string(t_block.z) +
                        ") never finishes: " + std::to_string(at_block) +
                        " thread(s) wait at __syncthreads, " + std::to_string(at_warp) +
                        " at a warp barrier whose other lanes wait elsewhere, " +
                        std::to_string(done) + " returned");
  }
}

// The launch's dynamic shared memory (FL_DYNAMIC_SHARED), as many elements as its bytes hold.
template <class T>
class DynamicShared {
 public:
  explicit DynamicShared(const char* name)
      : data_(reinterpret_cast<T*>(g_dynamic_shared.data())),
        count_(g_dynamic_shared.size() / sizeof(T)),
        name_(name) {}
  SharedRef<T> operator[](long long i) const { return {data_, i, count_, name_, "dynamic"}; }

 private:
  T* data_;
  size_t count_;
  const char* name_;
};

template <class... P, class... A>
void run_grid(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
              A... args) {
  g_dynamic_shared.assign(shared, 0);
  g_violations.kernel = name;
  g_violations.count = 0;
  g_violations.first.clear();
  const unsigned threads = block.x * block.y * block.z;
  g_stacks.reserve(threads);
  Block b;
  b.fibers.resize(threads);
  b.slots.assign(threads, 0.0);
  for (unsigned i = 0; i < threads; ++i) {
    b.fibers[i].thread = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
  }
  b.body = [&] { kernel(static_cast<P>(args)...); };
  t_block_dim = block;
  t_grid_dim = grid;
  t_current = &b;
  struct Reset {
    ~Reset() { t_current = nullptr; }
  } reset;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        t_block = dim3(bx, by, bz);
        run_block(b, name);
      }
    }
  }
  if (g_violations.count > 0) {
    throw SharedMemoryError(std::to_string(g_violations.count) +
                            " out-of-bounds shared-memory access(es) in " + name + ":" +
                            g_violations.first);
  }
}

template <class K>
struct Launch {
  K kernel;
  const char* name;
  dim3 grid, block;
  size_t shared;
  template <class... A>
  void operator()(A... args) const {
    run_grid(name, kernel, grid, block, shared, args...);
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
// Shared memory only through the checked declarations below.
#define __shared__ use_FL_SHARED_ARRAY_or_FL_DYNAMIC_SHARED_so_that_the_emulation_checks_bounds
#define threadIdx (::emu::t_thread)
#define blockIdx (::emu::t_block)
#define blockDim (::emu::t_block_dim)
#define gridDim (::emu::t_grid_dim)
#define FL_LAUNCH(kernel, grid, block, shared)                                 \
  (::emu::Launch<decltype(&kernel)>{&kernel, #kernel, dim3(grid), dim3(block), \
                                    static_cast<size_t>(shared)})
#define FL_SHARED_ARRAY(type, name, count) static ::emu::SharedArray<type, (count)> name(#name)
#define FL_DYNAMIC_SHARED(type, name) const ::emu::DynamicShared<type> name(#name)

inline void __syncthreads() {
  emu::wait_at(emu::State::at_block_barrier);
}
inline void __syncwarp() {
  emu::wait_at(emu::State::at_warp_barrier);
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
