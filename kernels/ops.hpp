// The kernels of the GPT-style decoder, forward and backward, fp32 math, and the buffer
// operations the trainer needs. One API for every device: each call runs on the calling thread's
// current device (fl::current_device()), the CPU kernels (GEMMs through OpenBLAS) or the CUDA
// kernels (GEMMs through cuBLAS), and every pointer must live on that device. Layouts follow the
// usual decoder conventions: activations are [B, T, C] row-major; a linear layer's weight is
// [OC, C] and computes out = inp · Wᵀ + b. Backward kernels accumulate (+=) into gradients, so
// gradient accumulation over micro-batches is free. Reduced precision (fp16, bf16) is a storage
// format: values are rounded to it (round-to-nearest-even, the format's range) and math stays
// fp32, the same on both devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/dtype.hpp"

namespace fl::ops {

struct AdamW {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// SGD as torch.optim.SGD does it (no dampening, not Nesterov): d = g + weight_decay · p; with
// momentum > 0, buf = momentum · buf + d and d = buf; then p -= lr · d.
struct Sgd {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

#include "kernels/ops_list.inc"

// The operand format of the GEMMs of linear and attention on the calling thread (like its current
// device): fp32 (the default: SGEMM, no TF32), or fp16/bf16 operands with fp32 accumulation and
// fp32 output (tensor cores; each GEMM input is converted to the 16-bit format first). Only CUDA
// has 16-bit GEMMs: a GEMM op on the CPU under fp16/bf16 raises ConfigError, so the CPU stays the
// fp32 reference. The trainer sets it from --precision on a CUDA rank (FAULTLINE_GEMM_PRECISION).
void set_gemm_precision(DType t);  // kF32, kF16 or kBF16; ConfigError naming what is allowed
// A training step begins (the trainer calls it with the step's number): under
// FAULTLINE_CUDA_OP_TIMES the per-op GPU times count from step FAULTLINE_CUDA_OP_TIMES_FROM
// (default 2: the first steps hold cuBLAS's loading and the allocator's growth). A no-op otherwise.
void begin_step(int64_t step);
DType gemm_precision();

class GemmPrecisionGuard {
 public:
  explicit GemmPrecisionGuard(DType t) : prev_(gemm_precision()) { set_gemm_precision(t); }
  ~GemmPrecisionGuard() { set_gemm_precision(prev_); }
  GemmPrecisionGuard(const GemmPrecisionGuard&) = delete;
  GemmPrecisionGuard& operator=(const GemmPrecisionGuard&) = delete;

 private:
  DType prev_;
};

// A host copy of device data for as long as the object lives, written back when it dies: fault
// sites act on host memory, so a plan that corrupts a kernel's input or the gradients works the
// same on a GPU. On CPU it is the data itself. `write_back` false: a read-only view.
class HostStage {
 public:
  HostStage(float* data, size_t n, bool write_back = true);
  ~HostStage();
  HostStage(const HostStage&) = delete;
  HostStage& operator=(const HostStage&) = delete;
  float* host() { return host_; }

 private:
  float* data_;
  float* host_;
  size_t n_;
  bool write_back_;
  std::vector<float> copy_;
};

}  // namespace fl::ops
