#include "kernels/caching_allocator.hpp"

namespace fl {

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < kSmallLimit ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  release_cached_locked();
  // Live blocks at exit belong to tensors that outlive the allocator (static objects); the
  // device reclaims them with the process.
}

void* CachingAllocator::allocate(size_t bytes, std::string_view what, MemoryAccountant& acct) {
  // Budget first: the same error as on CPU, before any device call.
  const MemCategory cat = acct.reserve(bytes, what);
  const size_t size = round_size(bytes);
  std::lock_guard lock(mu_);
  // A cached block of this size class, or of a larger one that wastes at most a quarter of it.
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= size + size / 4) {
    void* p = it->second;
    live_[p] = {it->first, bytes, cat};
    stats_.in_use += it->first;
    ++stats_.cache_hits;
    cached_.erase(it);
    return p;
  }
  std::string error;
  void* p = raw_.allocate(size, error);
  if (p == nullptr && !cached_.empty()) {
    // Fragmented by cached blocks of other sizes: give them all back and try once more.
    release_cached_locked();
    ++stats_.cache_flushes;
    error.clear();
    p = raw_.allocate(size, error);
  }
  if (p == nullptr) {
    acct.release(bytes, cat);
    acct.raise_out_of_memory(bytes, what, error);
  }
  ++stats_.device_allocs;
  stats_.reserved += size;
  stats_.in_use += size;
  live_[p] = {size, bytes, cat};
  return p;
}

void CachingAllocator::free(void* p, MemoryAccountant& acct) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours (already released by empty_cache at exit)
  const size_t size = it->second.size;
  acct.release(it->second.charged, it->second.category);
  live_.erase(it);
  stats_.in_use -= size;
  cached_.emplace(size, p);
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, p] : cached_) {
    raw_.release(p);
    stats_.reserved -= size;
    ++stats_.device_frees;
  }
  cached_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  release_cached_locked();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fl
