// workload.optimizer: muon (docs/workloads.md, "Muon"): DeepSpeed's MuonWithAuxAdam. The 2-D
// parameters whose state-dict names hold neither "embed" nor "lm_head" (DeepSpeed's
// set_optimizer_flags marks them use_muon) are updated with Muon: Nesterov momentum (beta
// workload.momentum, DeepSpeed's default 0.95), the momentum-mixed gradient orthogonalised by
// five Newton-Schulz iterations (coefficients 3.4445, -4.7750, 2.0315, on the matrix divided by
// its Frobenius norm, transposed when it has more rows than columns), scaled by
// sqrt(max(1, rows / cols)), then p -= lr x update after p *= 1 - lr x weight_decay. Every other
// parameter is updated with AdamW.
//
// Where the orthogonalisation runs is DeepSpeed's (0.17.6 to 0.19.5): in the ZeRO optimizer, on
// each parameter's whole gradient before its flat partition is cut (stage_1_and_2.py's
// get_flat_partition). At ZeRO stage 0, DeepSpeed's default, there is no ZeRO optimizer, and
// MuonWithAuxAdam.step() only does p -= lr x grad for the use_muon parameters: no momentum, no
// Newton-Schulz, plain SGD with no error or warning (deepspeedai/DeepSpeed#8441).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/model/params.hpp"
#include "workloads/parallel/zero.hpp"

namespace fl::train {

// One parameter Muon updates: its flat offset and its (whole, tp 1) shape.
struct MuonMatrix {
  size_t offset = 0;
  int64_t rows = 0, cols = 0;
  size_t numel() const { return static_cast<size_t>(rows * cols); }
};

// The use_muon parameters of `layout` in flat order (a tied head's copy, param.shared, is
// updated as its original is, and left out).
std::vector<MuonMatrix> muon_matrices(const model::ParamLayout& layout);

// Five Newton-Schulz iterations on the host matrix `x` [rows, cols], in place: its nearest
// semi-orthogonal matrix (approximately), as zeropower_via_newtonschulz5 computes it in fp32.
void newton_schulz5(float* x, int64_t rows, int64_t cols);

class Muon {
 public:
  // `momentum_acct`: where the momentum buffer (every use_muon element, on every rank) is charged.
  Muon(const model::ParamLayout& layout, float momentum, MemoryAccountant& momentum_acct);

  // The Muon update of every use_muon matrix, written over its gradient in `grads` (the flat
  // gradients of elements [first, first + n), every use_muon element among them; any device):
  // what DeepSpeed's ZeRO-1/2 optimizer does before it cuts the partitions.
  void orthogonalise(float* grads, size_t first, size_t n);
  // [lo, hi) offsets from `first` of the use_muon elements among [first, first + n), sorted.
  std::vector<std::pair<size_t, size_t>> runs(size_t first, size_t n) const;
  // MuonWithAuxAdam.step() on the elements [a, b) of an update: its use_muon ones take
  // p *= 1 - lr x weight_decay, p -= lr x grad (the gradient is Muon's update when the ZeRO
  // optimizer made it one), the others `adamw(lo, hi)` (offsets into the update).
  void step(const parallel::ZeroEngine::Update& u, size_t a, size_t b, float lr, float weight_decay,
            const std::function<void(size_t, size_t)>& adamw) const;

 private:
  std::vector<MuonMatrix> matrices_;
  float beta_;
  Tensor momentum_;  // the matrices' momentum, back to back
};

}  // namespace fl::train
