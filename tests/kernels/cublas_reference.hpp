// A reference of cuBLAS's strided-batched SGEMM semantics on the CPU (column-major, op(X) = X or
// Xᵀ), for tests that execute kernels/cuda/gemm_plan.hpp without a GPU.
#pragma once

#include <cstddef>

#include "kernels/cuda/gemm_plan.hpp"

namespace fl::test {

inline void reference_gemm(const cuda::plan::ColGemm& g) {
  for (int bi = 0; bi < g.batch; ++bi) {
    const float* A = g.A + bi * g.sa;
    const float* B = g.B + bi * g.sb;
    float* C = g.C + bi * g.sc;
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        double s = 0;
        for (int p = 0; p < g.k; ++p) {
          const float a =
              g.ta ? A[p + static_cast<size_t>(i) * g.lda] : A[i + static_cast<size_t>(p) * g.lda];
          const float b =
              g.tb ? B[j + static_cast<size_t>(p) * g.ldb] : B[p + static_cast<size_t>(j) * g.ldb];
          s += static_cast<double>(a) * b;
        }
        float& c = C[i + static_cast<size_t>(j) * g.ldc];
        c = static_cast<float>(g.alpha * s + (g.beta == 0.0f ? 0.0 : g.beta * c));
      }
    }
  }
}

}  // namespace fl::test
