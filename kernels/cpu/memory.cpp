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

MemCategory memory_category(std::string_view what) {
  auto starts = [&](std::string_view p) { return what.substr(0, p.size()) == p; };
  if (starts("optimizer.")) return MemCategory::kOptimizer;
  if (starts("params.")) return MemCategory::kParams;
  if (starts("grads.")) return MemCategory::kGrads;
  if (starts("act.") || starts("grad.act.")) return MemCategory::kActivations;
  if (starts("gather.")) return MemCategory::kGathers;
  return MemCategory::kBuffers;
}

const char* memory_category_name(MemCategory c) {
  static const char* const names[kMemCategories] = {"params",      "grads",   "optimizer",
                                                    "activations", "buffers", "gathers"};
  return names[static_cast<size_t>(c)];
}

namespace {
void raise_to(std::atomic<size_t>& peak, size_t now) {
  size_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

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

MemoryAccountant& MemoryAccountant::host() {
  static MemoryAccountant acct(
      static_cast<size_t>(std::max<int64_t>(0, kHostMemoryBudgetBytes.get())));
  static const bool labelled = (acct.set_label("host"), true);
  (void)labelled;
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
                  rank_ >= 0 ? rank_ : fault::current_rank(),
                  label_.empty() ? device_.str() : label_, format_bytes(bytes), what,
                  format_bytes(cur), budget_ ? format_bytes(budget_) : "unlimited",
                  format_bytes(budget_ > cur ? budget_ - cur : 0), format_bytes(peak()),
                  cause.empty() ? "" : "; ", cause),
      bytes, cur, budget_);
}

MemCategory MemoryAccountant::reserve(size_t bytes, std::string_view what) {
  auto verdict = FAULTLINE_FAULT_POINT(
      "memory.alloc", (fault::SiteContext{-1, "", what, -1, nullptr, bytes, DType::kU8, -1}));
  size_t cur = current_.load(std::memory_order_relaxed);
  for (;;) {
    if (verdict == fault::Verdict::kFail || (budget_ != 0 && cur + bytes > budget_)) {
      raise_out_of_memory(bytes, what);
    }
    if (current_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) break;
  }
  raise_to(peak_, cur + bytes);
  raise_to(run_peak_, cur + bytes);
  const MemCategory c = memory_category(what);
  const auto i = static_cast<size_t>(c);
  raise_to(cat_peak_[i], by_cat_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  if (c == MemCategory::kParams || c == MemCategory::kGrads || c == MemCategory::kOptimizer) {
    raise_to(model_peak_, current(MemCategory::kParams) + current(MemCategory::kGrads) +
                              current(MemCategory::kOptimizer));
  }
  return c;
}

void MemoryAccountant::release(size_t bytes, MemCategory c) {
  current_.fetch_sub(bytes, std::memory_order_relaxed);
  by_cat_[static_cast<size_t>(c)].fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace fl
