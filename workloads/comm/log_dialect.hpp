// Log fidelity: the error lines a worker prints when it fails. The default dialect ("faultline")
// prints faultline's own sentence (`faultline worker error (KIND): MESSAGE`), which the scenarios'
// oracles match. The "pytorch" dialect prints, in its place, the lines a real PyTorch / NCCL /
// DeepSpeed job prints for the same event, with the numbers of the event (seq, op, element
// counts, timeout, bytes): what log-based tools built on real logs read. The error event sent to
// the harness keeps faultline's message either way (the oracles' ground truth).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "base/settings.hpp"

namespace fl::comm {

FAULTLINE_SETTING(kLogFidelity, std::string, "FAULTLINE_LOG_FIDELITY", "faultline",
                  "Error lines a failing worker prints: faultline (its own sentences) or pytorch "
                  "(the lines real PyTorch/NCCL/DeepSpeed jobs print for the same event)");

// True when FAULTLINE_LOG_FIDELITY is "pytorch"; throws SettingError on any other value than
// faultline or pytorch.
bool pytorch_dialect();

// What a collective timeout knew, for the watchdog line.
struct TimeoutInfo {
  int64_t seq = -1;
  std::string op_type;  // PyTorch's OpType name: ALLREDUCE, ALLGATHER, BROADCAST, ...
  size_t numel_in = 0, numel_out = 0;
  int64_t timeout_ms = 0, elapsed_ms = 0;
};

// PyTorch's OpType name of a faultline op kind (OpKind's value).
const char* pytorch_op_type(int op_kind);

struct FlightEntry;
// The watchdog's view of flight entry `d` in a group of `world` ranks that timed out after
// `elapsed_ms` (NumelOut: all-gather's output is world x its input, reduce-scatter's 1/world).
TimeoutInfo timeout_info(const FlightEntry& d, int world, int64_t elapsed_ms, int64_t timeout_ms);

// ProcessGroupNCCL's watchdog line ("[rankR]:[E ...] [Rank R] Watchdog caught collective operation
// timeout: WorkNCCL(SeqNum=..., OpType=..., NumelIn=..., NumelOut=..., Timeout(ms)=...) ran for
// ... milliseconds before timing out.").
std::string watchdog_timeout_line(int rank, const TimeoutInfo& t);

// PyTorch's caching-allocator OOM line (torch.OutOfMemoryError ... Tried to allocate ... GPU D has
// a total capacity of ... of which ... is free ... allocated by PyTorch ... reserved by PyTorch
// but unallocated ...). Byte counts are formatted as PyTorch does ("20.00 MiB", "0 bytes").
std::string cuda_oom_line(int device, size_t requested, size_t total, size_t free_bytes,
                          size_t in_use, size_t allocated, size_t reserved_unallocated);

// PyTorch's byte format in its OOM message ("0 bytes", "512 bytes", "1.50 KiB", "20.00 MiB").
std::string torch_bytes(size_t bytes);

// An NCCL warning line: "HOST:PID:TID [DEV] FILE:LINE NCCL WARN MESSAGE".
std::string nccl_warn_line(int device, std::string_view where, std::string_view message);

// The lines the pytorch dialect prints for a worker's fatal error `e` of class `kind` (the
// worker's error class: "comm timeout", "out of memory", "store", ...) on `rank`; empty when real
// jobs have no counterpart (the faultline line is printed then).
std::vector<std::string> pytorch_lines(const std::exception& e, std::string_view kind, int rank);

}  // namespace fl::comm
