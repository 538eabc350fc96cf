#include "kernels/memory.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>

#include "injector/site.hpp"

namespace fl {

std::string format_bytes(size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / (1ull << 10));
  return fmt::format("{} B", bytes);
}

MemoryAccountant::MemoryAccountant(size_t budget, int rank, Device device)
    : budget_(budget), rank_(rank), device_(device) {}

namespace {
size_t budget_setting() {
  return static_cast<size_t>(std::max<int64_t>(0, kMemoryBudgetBytes.get()));
}
}  // namespace

MemoryAccountant& MemoryAccountant::cpu() {
  static MemoryAccountant acct(budget_setting());
  return acct;
}

MemoryAccountant& MemoryAccountant::cuda(int index) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<MemoryAccountant>> accts;
  std::lock_guard lock(mu);
  auto& a = accts[index];
  if (!a)
    a = std::make_unique<MemoryAccountant>(budget_setting(), cpu().rank(), Device::cuda(index));
  return *a;
}

void MemoryAccountant::raise_out_of_memory(size_t bytes, std::string_view what,
                                           std::string_view cause) const {
  const size_t cur = current();
  throw OutOfMemoryError(
      fmt::format("[rank {}] out of memory on {}: tried to allocate {} for '{}'; {} already "
                  "allocated, budget {} ({} free), peak {}{}{}",
                  rank_ >= 0 ? rank_ : fault::current_rank(), device_.str(), format_bytes(bytes),
                  what, format_bytes(cur), budget_ ? format_bytes(budget_) : "unlimited",
                  format_bytes(budget_ > cur ? budget_ - cur : 0), format_bytes(peak()),
                  cause.empty() ? "" : "; ", cause),
      bytes, cur, budget_);
}

void MemoryAccountant::reserve(size_t bytes, std::string_view what) {
  auto verdict = FAULTLINE_FAULT_POINT(
      "memory.alloc", (fault::SiteContext{-1, "", what, -1, nullptr, bytes, DType::kU8, -1}));
  size_t cur = current_.load(std::memory_order_relaxed);
  for (;;) {
    if (verdict == fault::Verdict::kFail || (budget_ != 0 && cur + bytes > budget_)) {
      raise_out_of_memory(bytes, what);
    }
    if (current_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) break;
  }
  size_t now = cur + bytes;
  size_t p = peak_.load(std::memory_order_relaxed);
  while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void MemoryAccountant::release(size_t bytes) {
  current_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace fl
