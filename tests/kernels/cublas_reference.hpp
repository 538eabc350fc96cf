// A reference of cuBLAS's strided-batched GEMM semantics on the CPU (column-major, op(X) = X or
// Xᵀ), for tests that execute kernels/cuda/gemm_plan.hpp without a GPU: cublasSgemm for fp32
// operands, cublasGemmEx with CUBLAS_COMPUTE_32F for fp16/bf16 operands (each 16-bit value is
// exactly a float; products summed in double here, fp32 output).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/cuda/gemm_plan.hpp"
#include "kernels/ops.hpp"

namespace fl::test {

// Element i of a GEMM operand in the given format, as a float.
inline float operand_value(const void* base, long long i, cuda::plan::Operands f) {
  using cuda::plan::Operands;
  if (f == Operands::kF32) return static_cast<const float*>(base)[i];
  const uint16_t bits = static_cast<const uint16_t*>(base)[i];
  return f == Operands::kF16 ? half_to_float(bits) : bf16_to_float(bits);
}

inline void reference_gemm(const cuda::plan::ColGemm& g) {
  for (int bi = 0; bi < g.batch; ++bi) {
    const long long a0 = bi * g.sa, b0 = bi * g.sb;
    float* C = g.C + bi * g.sc;
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        double s = 0;
        for (int p = 0; p < g.k; ++p) {
          const long long ia =
              g.ta ? p + static_cast<long long>(i) * g.lda : i + static_cast<long long>(p) * g.lda;
          const long long ib =
              g.tb ? j + static_cast<long long>(p) * g.ldb : p + static_cast<long long>(j) * g.ldb;
          s += static_cast<double>(operand_value(g.A, a0 + ia, g.operands)) *
               operand_value(g.B, b0 + ib, g.operands);
        }
        float& c = C[i + static_cast<size_t>(j) * g.ldc];
        c = static_cast<float>(g.alpha * s + (g.beta == 0.0f ? 0.0 : g.beta * c));
      }
    }
  }
}

// gemm_plan's executor on the CPU: cuBLAS by the book (reference_gemm) in the given operand format,
// the softmax steps as kernels/cuda/launch.hpp documents them, bias through the CPU ops. It counts
// GEMMs and 16-bit conversions. With `round_to` set (and fp32 operands), every value a GEMM reads
// is first rounded to that 16-bit format: what the 16-bit plan must compute if its layout is right.
struct ReferenceExec {
  cuda::plan::Operands format = cuda::plan::Operands::kF32;
  cuda::plan::Operands round_to = cuda::plan::Operands::kF32;
  int gemms = 0;
  int conversions = 0;

  cuda::plan::Operands operands() const { return format; }
  void gemm(const cuda::plan::ColGemm& g, const char*) {
    ++gemms;
    if (round_to == cuda::plan::Operands::kF32) return reference_gemm(g);
    // Round the spans the GEMM reads (stored rows x cols, column-major) into copies, run on those.
    auto rounded = [&](const void* p, int rows, int cols, int ld, long long stride) {
      const long long span = (g.batch - 1) * stride + static_cast<long long>(cols - 1) * ld + rows;
      std::vector<float> v(static_cast<const float*>(p), static_cast<const float*>(p) + span);
      ops::round_to_precision(v.data(), v.size(), static_cast<DType>(round_to));
      return v;
    };
    const auto a = rounded(g.A, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.sa);
    const auto b = rounded(g.B, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.sb);
    cuda::plan::ColGemm r = g;
    r.A = a.data();
    r.B = b.data();
    reference_gemm(r);
  }
  struct Scratch16 {
    std::vector<uint16_t> v;
    uint16_t* data() { return v.data(); }
  };
  Scratch16 scratch16(size_t n, const char*) { return Scratch16{std::vector<uint16_t>(n, 0x7e00)}; }
  void to16(const float* src, uint16_t* dst, size_t n, cuda::plan::Operands f) {
    ++conversions;
    ops::encode(src, dst, static_cast<DType>(f), n);
  }
  // The head layout by the book (launch.hpp): fn(i, r) for element i of [parts, B, NH, T, hs] and
  // its place r in rows of ld floats.
  template <class Fn>
  static void for_each_head_element(int ld, int parts, int B, int T, int NH, int hs, Fn fn) {
    size_t i = 0;
    for (int p = 0; p < parts; ++p) {
      for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
          for (int t = 0; t < T; ++t) {
            for (int j = 0; j < hs; ++j, ++i) {
              fn(i, (static_cast<size_t>(b) * T + t) * ld + (p * NH + h) * hs + j);
            }
          }
        }
      }
    }
  }
  // A 16-bit gather counts as a conversion.
  void split_heads(const float* src, int ld, int parts, void* dst, cuda::plan::Operands f, int B,
                   int T, int NH, int hs) {
    if (f != cuda::plan::Operands::kF32) ++conversions;
    for_each_head_element(ld, parts, B, T, NH, hs, [&](size_t i, size_t r) {
      if (f == cuda::plan::Operands::kF32) {
        static_cast<float*>(dst)[i] = src[r];
      } else {
        ops::encode(src + r, static_cast<uint16_t*>(dst) + i, static_cast<DType>(f), 1);
      }
    });
  }
  void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int B, int T,
                   int NH, int hs) {
    for_each_head_element(ld, parts, B, T, NH, hs, [&](size_t i, size_t r) {
      dst[r] = accumulate ? dst[r] + src[i] : src[i];
    });
  }
  void causal_softmax_forward(float* att, int rows, int T) {
    for (int r = 0; r < rows; ++r) {
      float* row = att + static_cast<size_t>(r) * T;
      const int t = r % T;
      float mx = row[0];
      for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
      float sum = 0;
      for (int s = 0; s <= t; ++s) sum += (row[s] = std::exp(row[s] - mx));
      for (int s = 0; s < T; ++s) row[s] = s <= t ? row[s] / sum : 0.0f;
    }
  }
  void causal_softmax_backward(float* d, const float* a, int rows, int T, float scale) {
    for (int r = 0; r < rows; ++r) {
      float* dr = d + static_cast<size_t>(r) * T;
      const float* ar = a + static_cast<size_t>(r) * T;
      const int t = r % T;
      float dot = 0;
      for (int s = 0; s <= t; ++s) dot += ar[s] * dr[s];
      for (int s = 0; s < T; ++s) dr[s] = s <= t ? ar[s] * (dr[s] - dot) * scale : 0.0f;
    }
  }
  void add_bias(float* out, const float* bias, int N, int C) { ops::add_bias(out, bias, N, C); }
  void bias_backward(float* dbias, const float* dout, int N, int C) {
    ops::bias_backward(dbias, dout, N, C);
  }
  struct Scratch {
    std::vector<float> v;
    float* data() { return v.data(); }
  };
  Scratch scratch(size_t floats, const char*) { return Scratch{std::vector<float>(floats, 7.0f)}; }
};

}  // namespace fl::test
