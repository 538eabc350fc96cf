// Memory accountant: every tensor allocation of a rank goes through it. With a budget set, an
// allocation that would exceed it raises OutOfMemoryError shaped like CUDA's message (what was
// requested, what is allocated, the budget, the peak, the rank), so memory symptoms reproduce on
// CPU exactly where a GPU would run out.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "kernels/device.hpp"

namespace fl {

FAULTLINE_SETTING(kMemoryBudgetBytes, int64_t, "FAULTLINE_MEMORY_BUDGET_BYTES", 0,
                  "Per-rank tensor memory budget in bytes (0: unlimited)");

FAULTLINE_SETTING(kHostMemoryBudgetBytes, int64_t, "FAULTLINE_HOST_MEMORY_BUDGET_BYTES", 0,
                  "Per-rank host memory budget in bytes for offloaded optimizer state and "
                  "model-file loads (0: unlimited)");

class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string msg, size_t requested, size_t allocated, size_t budget)
      : Error(std::move(msg)), requested_(requested), allocated_(allocated), budget_(budget) {}
  size_t requested() const { return requested_; }
  size_t allocated() const { return allocated_; }
  size_t budget() const { return budget_; }

 private:
  size_t requested_, allocated_, budget_;
};

// "20.00 MiB", "1.50 GiB", "512 B".
std::string format_bytes(size_t bytes);

// What an allocation holds, from the prefix of its name: "params." (the model's weights; fp32
// master weights count as optimizer state, "optimizer.master"), "grads.", "optimizer.", "act." and
// "grad.act." (activations and their gradients), "gather." (ZeRO-3 parameters gathered for a
// layer); anything else is a buffer (communication buckets, staging, masks).
enum class MemCategory : uint8_t { kParams, kGrads, kOptimizer, kActivations, kBuffers, kGathers };
inline constexpr int kMemCategories = 6;
MemCategory memory_category(std::string_view what);
const char* memory_category_name(MemCategory c);

class MemoryAccountant {
 public:
  // budget 0 = unlimited. `rank` and `device` appear in the error message; tensors charged to
  // this accountant live on `device`.
  explicit MemoryAccountant(size_t budget = 0, int rank = -1, Device device = Device::cpu());

  // Reserves `bytes` for `what`; throws OutOfMemoryError if the budget would be exceeded.
  // Returns the category charged (memory_category(what)); release with the same one.
  MemCategory reserve(size_t bytes, std::string_view what);
  void release(size_t bytes, MemCategory c = MemCategory::kBuffers);
  // The out-of-memory error of this accountant for a request of `bytes` for `what` (the budget
  // check and a device that refuses memory raise the same shape); `cause`, when given, is
  // appended (the device's own reason).
  [[noreturn]] void raise_out_of_memory(size_t bytes, std::string_view what,
                                        std::string_view cause = {}) const;

  size_t current() const { return current_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  size_t budget() const { return budget_; }
  void set_budget(size_t b) { budget_ = b; }
  void reset_peak() { peak_.store(current(), std::memory_order_relaxed); }
  // Per category: bytes held now, and the most held at once since the accountant was made (not
  // reset by reset_peak). model_state_peak: the most params + grads + optimizer held at once.
  size_t current(MemCategory c) const {
    return by_cat_[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  }
  size_t peak(MemCategory c) const {
    return cat_peak_[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  }
  size_t model_state_peak() const { return model_peak_.load(std::memory_order_relaxed); }
  // The most held at once since the accountant was made (peak() restarts at reset_peak).
  size_t run_peak() const { return run_peak_.load(std::memory_order_relaxed); }
  int rank() const { return rank_; }
  void set_rank(int r) { rank_ = r; }

  Device device() const { return device_; }
  // What the out-of-memory message calls this memory (default: the device, "cpu", "cuda:0").
  void set_label(std::string label) { label_ = std::move(label); }

  // The process-wide accountant of the CPU device.
  static MemoryAccountant& cpu();
  // The process-wide accountant of host memory holding offloaded state (ZeRO-Offload), apart
  // from the compute device's: its own budget (FAULTLINE_HOST_MEMORY_BUDGET_BYTES), and its
  // errors say "out of memory on host".
  static MemoryAccountant& host();
  // The process-wide accountant of CUDA device `index` (same budget setting as the CPU's).
  static MemoryAccountant& cuda(int index);
  // The accountant of `d`.
  static MemoryAccountant& of(Device d) { return d.is_cuda() ? cuda(d.index) : cpu(); }

 private:
  size_t budget_;
  int rank_;
  Device device_;
  std::string label_;
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
  std::array<std::atomic<size_t>, kMemCategories> by_cat_{};
  std::array<std::atomic<size_t>, kMemCategories> cat_peak_{};
  std::atomic<size_t> model_peak_{0};
  std::atomic<size_t> run_peak_{0};
};

}  // namespace fl
