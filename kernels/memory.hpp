// Memory accountant: every tensor allocation of a rank goes through it. With a budget set, an
// allocation that would exceed it raises OutOfMemoryError shaped like CUDA's message (what was
// requested, what is allocated, the budget, the peak, the rank), so memory symptoms reproduce on
// CPU exactly where a GPU would run out.
#pragma once

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

class MemoryAccountant {
 public:
  // budget 0 = unlimited. `rank` and `device` appear in the error message; tensors charged to
  // this accountant live on `device`.
  explicit MemoryAccountant(size_t budget = 0, int rank = -1, Device device = Device::cpu());

  // Reserves `bytes` for `what`; throws OutOfMemoryError if the budget would be exceeded.
  void reserve(size_t bytes, std::string_view what);
  void release(size_t bytes);
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
  int rank() const { return rank_; }
  void set_rank(int r) { rank_ = r; }

  Device device() const { return device_; }

  // The process-wide accountant of the CPU device.
  static MemoryAccountant& cpu();
  // The process-wide accountant of CUDA device `index` (same budget setting as the CPU's).
  static MemoryAccountant& cuda(int index);
  // The accountant of `d`.
  static MemoryAccountant& of(Device d) { return d.is_cuda() ? cuda(d.index) : cpu(); }

 private:
  size_t budget_;
  int rank_;
  Device device_;
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace fl
