// The device allocator's policy on a host-backed device of fixed capacity: size classes, reuse of
// cached blocks, the budget check before any device call, releasing the cache when the device
// refuses, and the out-of-memory error (the CPU accountant's shape, the device's reason appended).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "kernels/caching_allocator.hpp"

namespace fl {
namespace {

class FakeDevice final : public RawDeviceMemory {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_EQ(used_, 0u) << "blocks never given back"; }
  void* allocate(size_t bytes, std::string& error) override {
    ++calls;
    if (used_ + bytes > capacity_) {
      error = "fake device: " + std::to_string(capacity_ - used_) + " bytes free";
      return nullptr;
    }
    used_ += bytes;
    void* p = std::malloc(bytes);
    sizes_[p] = bytes;
    return p;
  }
  void release(void* p) override {
    used_ -= sizes_.at(p);
    sizes_.erase(p);
    std::free(p);
  }
  size_t used() const { return used_; }
  int calls = 0;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> sizes_;
};

constexpr size_t kMiB = 1u << 20;

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB - 1), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(3 * kMiB), 4 * kMiB);
}

TEST(CachingAllocator, FreedBlocksAreReusedWithoutDeviceCalls) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct(0, 0, Device::cuda(0));
  {
    CachingAllocator alloc(dev);
    void* a = alloc.allocate(1000, "a", acct);
    EXPECT_EQ(acct.current(), 1000u);  // the accountant sees what was asked for
    alloc.free(a, acct);
    EXPECT_EQ(acct.current(), 0u);
    void* b = alloc.allocate(900, "b", acct);  // same 1024-byte class
    EXPECT_EQ(b, a);
    void* c = alloc.allocate(900, "c", acct);  // the cached block is taken: a new one
    EXPECT_NE(c, a);
    auto s = alloc.stats();
    EXPECT_EQ(s.device_allocs, 2u);
    EXPECT_EQ(s.cache_hits, 1u);
    EXPECT_EQ(s.in_use, 2048u);
    EXPECT_EQ(dev.calls, 2);
    alloc.free(b, acct);
    alloc.free(c, acct);
    EXPECT_EQ(alloc.stats().reserved, 2048u);  // still held: cached
    alloc.empty_cache();
    EXPECT_EQ(alloc.stats().reserved, 0u);
    EXPECT_EQ(dev.used(), 0u);
  }
}

TEST(CachingAllocator, ALargeCachedBlockIsNotWastedOnASmallRequest) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct(0, 0, Device::cuda(0));
  CachingAllocator alloc(dev);
  void* big = alloc.allocate(8 * kMiB, "big", acct);
  alloc.free(big, acct);
  void* small = alloc.allocate(4 * kMiB, "small", acct);  // 8 MiB > 1.25 x 4 MiB: not reused
  EXPECT_NE(small, big);
  alloc.free(small, acct);
}

TEST(CachingAllocator, BudgetIsCheckedBeforeTheDevice) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct(4096, 3, Device::cuda(1));
  CachingAllocator alloc(dev);
  try {
    alloc.allocate(8192, "act.h0.att", acct);
    FAIL() << "allocation over the budget succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 3] out of memory on cuda:1: tried to allocate 8.00 KiB for 'act.h0.att'; "
                 "0 B already allocated, budget 4.00 KiB (4.00 KiB free), peak 0 B");
  }
  EXPECT_EQ(dev.calls, 0);
  EXPECT_EQ(acct.current(), 0u);
}

TEST(CachingAllocator, DeviceRefusalReleasesTheCacheAndRetries) {
  FakeDevice dev(6 * kMiB);
  MemoryAccountant acct(0, 0, Device::cuda(0));
  CachingAllocator alloc(dev);
  void* a = alloc.allocate(3 * kMiB, "a", acct);    // 4 MiB class
  alloc.free(a, acct);                              // cached, still held from the device
  void* b = alloc.allocate(512 * 1024, "b", acct);  // 512 KiB class: device has 2 MiB free, fine
  void* c = alloc.allocate(2 * kMiB, "c", acct);    // 2 MiB class: refused, cache flushed, retried
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(alloc.stats().cache_flushes, 1u);
  alloc.free(b, acct);
  alloc.free(c, acct);
}

TEST(CachingAllocator, FinalRefusalIsTheAccountantsErrorWithTheDevicesReason) {
  FakeDevice dev(2 * kMiB);
  MemoryAccountant acct(0, 5, Device::cuda(0));
  CachingAllocator alloc(dev);
  try {
    alloc.allocate(3 * kMiB, "params.master", acct);
    FAIL() << "allocation beyond the device succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 5] out of memory on cuda:0: tried to allocate 3.00 MiB for "
                 "'params.master'; 0 B already allocated, budget unlimited (0 B free), peak "
                 "3.00 MiB; fake device: 2097152 bytes free");
    EXPECT_EQ(e.requested(), 3 * kMiB);
  }
  EXPECT_EQ(acct.current(), 0u);  // the charge was undone
}

}  // namespace
}  // namespace fl
