// How the CUDA path lays the decoder's matrix products onto cuBLAS, written once over an executor
// so that the same code runs against cuBLAS (kernels/cuda/ops_cuda.cpp) and, in a CPU test,
// against a reference of cuBLAS's column-major semantics (tests/kernels/gemm_plan_test.cpp). The
// transpositions, leading dimensions and batch strides are where a GPU port goes wrong, and this
// way they are checked on every machine. Plain C++ (no CUDA headers).
//
// Two operand formats: fp32 (cublasSgemm / cublasSgemmStridedBatched, no TF32), or 16-bit
// (fp16 or bf16 operands, fp32 accumulation and fp32 output: cublasGemmEx /
// cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F, tensor cores). In the 16-bit format each
// GEMM input is first converted into a 16-bit copy in the executor's scratch (one conversion per
// operand and op: attention's q, k, v and output gradient in the pass that gathers them into head
// layout, the probabilities once for all sequences), and the GEMM reads the copy with the same
// layout, so one plan serves both formats.
//
// An executor provides:
//   void gemm(const ColGemm&, const char* what);
//   Operands operands();                          // the format of this executor's GEMM inputs
//   S16 scratch16(size_t n, const char* what);    // n 16-bit elements: S16 has uint16_t* data(),
//                                                 // is default-constructible and movable
//   void to16(const float* src, uint16_t* dst, size_t n, Operands format);
//   void split_heads(const float* src, int ld, int parts, void* dst, Operands format, int B,
//                    int T, int NH, int hs);        // as launch::split_heads (launch.hpp)
//   void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int B,
//                    int T, int NH, int hs);
//   void causal_softmax_forward(float* att, int rows, int T);
//   void causal_softmax_backward(float* datt, const float* att, int rows, int T, float scale);
//   void add_bias(float* out, const float* bias, int N, int C);
//   void bias_backward(float* dbias, const float* dout, int N, int C);
//   Scratch scratch(size_t floats, const char* what);  // Scratch has float* data(), is
//                                                      // default-constructible and movable
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace fl::cuda::plan {

// The format of a GEMM's A and B operands (C is fp32 in both), numbered as fl::DType's fp32, fp16
// and bf16 (and launch::kF16 / kBF16).
enum class Operands : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline size_t operand_bytes(Operands f) {
  return f == Operands::kF32 ? 4 : 2;
}
inline const char* operands_name(Operands f) {
  return f == Operands::kF32 ? "sgemm" : f == Operands::kF16 ? "gemmex fp16" : "gemmex bf16";
}

// One (strided-batched) GEMM in cuBLAS's terms: column-major C[m, n] = alpha · op(A) · op(B) +
// beta · C, op(A) [m, k], op(B) [k, n]; matrix i of a batch starts i·stride elements in. A and B
// hold `operands` elements (fp32 or 16-bit), C fp32.
struct ColGemm {
  bool ta, tb;
  int m, n, k;
  float alpha;
  const void* A;
  int lda;
  long long sa;
  const void* B;
  int ldb;
  long long sb;
  float beta;
  float* C;
  int ldc;
  long long sc;
  int batch;
  Operands operands;
};

// Row-major C[M, N] = alpha · op(A) · op(B) + beta · C, with lda/ldb/ldc the row strides of A, B
// and C as stored. A row-major matrix read column-major is its transpose, so cuBLAS computes
// Cᵀ = op(B)ᵀ · op(A)ᵀ on the same memory: swap the operands and the sizes M and N.
inline ColGemm row_major(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                         long long sa, const void* B, int ldb, long long sb, float beta, float* C,
                         int ldc, long long sc, int batch, Operands operands) {
  return {tb, ta, N, M, K, alpha, B, ldb, sb, A, lda, sa, beta, C, ldc, sc, batch, operands};
}
inline ColGemm row_major(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                         int lda, long long sa, const float* B, int ldb, long long sb, float beta,
                         float* C, int ldc, long long sc, int batch) {
  return row_major(ta, tb, M, N, K, alpha, static_cast<const void*>(A), lda, sa,
                   static_cast<const void*>(B), ldb, sb, beta, C, ldc, sc, batch, Operands::kF32);
}
inline ColGemm row_major(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                         int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  return row_major(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

// A GEMM input as the executor's GEMMs read it: the fp32 data itself, or its 16-bit copy (kept
// alive by `copy`). at(i) is element i of the same row-major layout.
template <class S16>
struct Operand {
  const void* data;
  Operands format;
  S16 copy;
  const void* at(size_t i) const {
    return static_cast<const char*>(data) + i * operand_bytes(format);
  }
};

template <class X>
auto operand(X& x, const float* src, size_t n, const char* what) {
  using S16 = decltype(x.scratch16(n, what));
  const Operands f = x.operands();
  if (f == Operands::kF32) return Operand<S16>{src, f, S16{}};
  S16 s = x.scratch16(n, what);
  x.to16(src, s.data(), n, f);
  const void* p = s.data();
  return Operand<S16>{p, f, std::move(s)};
}

// out = inp · Wᵀ (+ bias): inp [N, C], weight [OC, C], out [N, OC].
template <class X>
void linear_forward(X& x, float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
  const auto a = operand(x, inp, static_cast<size_t>(N) * C, "scratch.gemm16.input");
  const auto w = operand(x, weight, static_cast<size_t>(OC) * C, "scratch.gemm16.weight");
  x.gemm(row_major(false, true, N, OC, C, 1.0f, a.at(0), C, 0, w.at(0), C, 0, 0.0f, out, OC, 0, 1,
                   a.format),
         "linear_forward");
  if (bias) x.add_bias(out, bias, N, OC);
}

// dinp += dout · W; dweight += doutᵀ · inp; dbias += Σ dout.
template <class X>
void linear_backward(X& x, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  if (dinp || dweight) {
    const auto d = operand(x, dout, static_cast<size_t>(N) * OC, "scratch.gemm16.dout");
    if (dinp) {
      const auto w = operand(x, weight, static_cast<size_t>(OC) * C, "scratch.gemm16.weight");
      x.gemm(row_major(false, false, N, C, OC, 1.0f, d.at(0), OC, 0, w.at(0), C, 0, 1.0f, dinp, C,
                       0, 1, d.format),
             "linear_backward dinp");
    }
    if (dweight) {
      const auto a = operand(x, inp, static_cast<size_t>(N) * C, "scratch.gemm16.input");
      x.gemm(row_major(true, false, OC, C, N, 1.0f, d.at(0), OC, 0, a.at(0), C, 0, 1.0f, dweight, C,
                       0, 1, d.format),
             "linear_backward dweight");
    }
  }
  if (dbias) x.bias_backward(dbias, dout, N, OC);
}

// Attention's operands in head layout: `parts` (q, k, v or one) of rows of `ld` floats gathered
// into [parts, B·NH, T, hs] in the executor's operand format (fp32, or converted to 16 bits in the
// same pass), so that one strided batch of B·NH matrices covers every sequence and head (a batch
// per sequence would be B launches of NH small GEMMs, too few blocks to fill a GPU).
template <class X>
struct Heads {
  using S32 = decltype(std::declval<X&>().scratch(size_t{}, ""));
  using S16 = decltype(std::declval<X&>().scratch16(size_t{}, ""));
  Operands format = Operands::kF32;
  S32 s32{};
  S16 s16{};
  const void* data = nullptr;
  size_t per_part = 0;  // elements of one part
  const void* part(int p) const {
    return static_cast<const char*>(data) + p * per_part * operand_bytes(format);
  }
};

template <class X>
Heads<X> split_heads(X& x, const float* src, int ld, int parts, int B, int T, int NH, int hs,
                     const char* what) {
  Heads<X> h;
  h.format = x.operands();
  h.per_part = static_cast<size_t>(B) * NH * T * hs;
  void* dst = nullptr;
  if (h.format == Operands::kF32) {
    h.s32 = x.scratch(parts * h.per_part, what);
    dst = h.s32.data();
  } else {
    h.s16 = x.scratch16(parts * h.per_part, what);
    dst = h.s16.data();
  }
  h.data = dst;
  x.split_heads(src, ld, parts, dst, h.format, B, T, NH, hs);
  return h;
}

// Causal self-attention, qkv [B, T, 3C] (q, k, v of head h at columns h·hs of each third),
// att [B, NH, T, T], out [B, T, C]. Every product is one strided batch of B·NH heads over the head
// layout; the outputs scatter back into [B, T, C] rows.
template <class X>
void attention_forward(X& x, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH) {
  const int hs = C / NH, bh = B * NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long tt = static_cast<long long>(T) * T, th = static_cast<long long>(T) * hs;
  const auto in = split_heads(x, qkv, 3 * C, 3, B, T, NH, hs, "scratch.attention.qkv");
  x.gemm(row_major(false, true, T, T, hs, scale, in.part(0), hs, th, in.part(1), hs, th, 0.0f, att,
                   T, tt, bh, in.format),
         "attention scores");
  x.causal_softmax_forward(att, bh * T, T);
  const auto p = operand(x, att, static_cast<size_t>(bh) * tt, "scratch.gemm16.att");
  auto y = x.scratch(static_cast<size_t>(bh) * th, "scratch.attention.out");
  x.gemm(row_major(false, false, T, hs, T, 1.0f, p.at(0), T, tt, in.part(2), hs, th, 0.0f, y.data(),
                   hs, th, bh, in.format),
         "attention values");
  x.merge_heads(out, C, 1, y.data(), false, B, T, NH, hs);
}

template <class X>
void attention_backward(X& x, float* dqkv, const float* dout, const float* qkv, const float* att,
                        int B, int T, int C, int NH) {
  const int hs = C / NH, bh = B * NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long tt = static_cast<long long>(T) * T, th = static_cast<long long>(T) * hs;
  const size_t part = static_cast<size_t>(bh) * th;
  const auto in = split_heads(x, qkv, 3 * C, 3, B, T, NH, hs, "scratch.attention.qkv");
  const auto dy = split_heads(x, dout, C, 1, B, T, NH, hs, "scratch.attention.dout");
  const auto p = operand(x, att, static_cast<size_t>(bh) * tt, "scratch.gemm16.att");
  auto datt = x.scratch(static_cast<size_t>(bh) * tt, "scratch.attention.datt");
  auto dh = x.scratch(3 * part, "scratch.attention.dqkv");  // dq, dk, dv in head layout
  float* d = datt.data();
  // datt = dout · vᵀ ; dv = attᵀ · dout
  x.gemm(row_major(false, true, T, T, hs, 1.0f, dy.part(0), hs, th, in.part(2), hs, th, 0.0f, d, T,
                   tt, bh, in.format),
         "attention backward datt");
  x.gemm(row_major(true, false, T, hs, T, 1.0f, p.at(0), T, tt, dy.part(0), hs, th, 0.0f,
                   dh.data() + 2 * part, hs, th, bh, in.format),
         "attention backward dv");
  x.causal_softmax_backward(d, att, bh * T, T, scale);
  // dq = dscore · k ; dk = dscoreᵀ · q
  const auto ds = operand(x, d, static_cast<size_t>(bh) * tt, "scratch.gemm16.datt");
  x.gemm(row_major(false, false, T, hs, T, 1.0f, ds.at(0), T, tt, in.part(1), hs, th, 0.0f,
                   dh.data(), hs, th, bh, in.format),
         "attention backward dq");
  x.gemm(row_major(true, false, T, hs, T, 1.0f, ds.at(0), T, tt, in.part(0), hs, th, 0.0f,
                   dh.data() + part, hs, th, bh, in.format),
         "attention backward dk");
  x.merge_heads(dqkv, 3 * C, 3, dh.data(), true, B, T, NH, hs);
}

}  // namespace fl::cuda::plan
