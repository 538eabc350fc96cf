// A caching allocator for device memory, in the manner of PyTorch's CUDA allocator: freed blocks
// stay reserved and are handed out again to requests of the same size class, so a training step
// does not call cudaMalloc/cudaFree (which synchronise the device) once it has warmed up. When the
// device itself refuses an allocation the cache is released and the request retried once; a
// second refusal becomes the same OutOfMemoryError the CPU accountant raises, plus the device's
// own words. Budgets (FAULTLINE_MEMORY_BUDGET_BYTES) stay with the MemoryAccountant: the
// allocator only decides where the bytes come from.
//
// The policy is independent of CUDA: the raw memory is an interface, so the policy is tested on
// CPU with a host-backed device of a chosen capacity.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/memory.hpp"

namespace fl {

// Where the allocator's blocks come from (cudaMalloc/cudaFree on a GPU).
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // nullptr and `error` set (e.g. "cudaMalloc: out of memory (cudaErrorMemoryAllocation); 1.20 GiB
  // free of 79.10 GiB") when the device cannot provide `bytes`.
  virtual void* allocate(size_t bytes, std::string& error) = 0;
  virtual void release(void* p) = 0;
};

struct CachingAllocatorStats {
  size_t in_use = 0;    // bytes of live blocks (rounded sizes)
  size_t reserved = 0;  // bytes held from the device: live + cached
  size_t device_allocs = 0;
  size_t device_frees = 0;
  size_t cache_hits = 0;
  size_t cache_flushes = 0;  // times the cache was released to satisfy a request
};

class CachingAllocator {
 public:
  explicit CachingAllocator(RawDeviceMemory& raw) : raw_(raw) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for `what`, charged to `acct` (which enforces the budget and
  // raises the error). If the device refuses even after the cache is emptied, the charge is
  // undone and OutOfMemoryError names the request and the device's reason.
  void* allocate(size_t bytes, std::string_view what, MemoryAccountant& acct);
  // Returns a block to the cache (and its charge to `acct`).
  void free(void* p, MemoryAccountant& acct);
  // Gives every cached block back to the device.
  void empty_cache();
  CachingAllocatorStats stats() const;

  // Size classes: multiples of 512 B below 1 MiB, of 2 MiB above.
  static size_t round_size(size_t bytes);

 private:
  void release_cached_locked();

  RawDeviceMemory& raw_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> cached_;  // size class -> free block
  struct Live {
    size_t size;     // size class held from the device
    size_t charged;  // bytes charged to the accountant
    MemCategory category;
  };
  std::unordered_map<void*, Live> live_;
  CachingAllocatorStats stats_;
};

}  // namespace fl
