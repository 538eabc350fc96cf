// Per-op GPU time, for finding where a CUDA step's time goes on a machine without Nsight: with
// FAULTLINE_CUDA_OP_TIMES=PATH set, every fl::ops call on a CUDA device is bracketed by two CUDA
// events on the compute stream, and at exit the process appends one JSON line per op to PATH:
//   {"op": "linear_forward", "calls": 1200, "ms": 210.4, "steps": 6, "pid": 4242}
// (nothing when no op ran on a CUDA device in the steps counted). A CUDA call of the timing that
// fails costs that call's measurement, never the op: its error is cleared.
// `ms` is the sum of the events' elapsed times: the GPU time from the op's first queued work to
// its last, which is the op's kernel time while the host keeps the queue full (and includes the
// GPU's idle gaps inside the op where it does not). Unset, a scope costs one branch. Plain C++ (no
// CUDA headers), for kernels/dispatch.cpp.
#pragma once

namespace fl::cuda {

bool op_times_enabled();
// Step `step` begins: the sums restart at the first step >= FAULTLINE_CUDA_OP_TIMES_FROM (default
// 2; a resumed run may start past it), and the file's lines say over how many steps they were
// taken.
void op_times_begin_step(long long step);

class OpTimeScope {
 public:
  explicit OpTimeScope(const char* op);
  ~OpTimeScope();
  OpTimeScope(const OpTimeScope&) = delete;
  OpTimeScope& operator=(const OpTimeScope&) = delete;

 private:
  long long id_ = -1;
};

}  // namespace fl::cuda
