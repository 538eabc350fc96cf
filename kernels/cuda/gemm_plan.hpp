// How the CUDA path lays the decoder's matrix products onto cuBLAS, written once over an executor
// so that the same code runs against cuBLAS (kernels/cuda/ops_cuda.cpp) and, in a CPU test,
// against a reference of cuBLAS's column-major semantics (tests/kernels/gemm_plan_test.cpp). The
// transpositions, leading dimensions and batch strides are where a GPU port goes wrong, and this
// way they are checked on every machine. Plain C++ (no CUDA headers).
//
// An executor provides:
//   void gemm(const ColGemm&, const char* what);
//   void causal_softmax_forward(float* att, int rows, int T);
//   void causal_softmax_backward(float* datt, const float* att, int rows, int T, float scale);
//   void add_bias(float* out, const float* bias, int N, int C);
//   void bias_backward(float* dbias, const float* dout, int N, int C);
//   Scratch scratch(size_t floats, const char* what);  // Scratch has float* data()
#pragma once

#include <cmath>
#include <cstddef>

namespace fl::cuda::plan {

// One (strided-batched) GEMM in cuBLAS's terms: column-major C[m, n] = alpha · op(A) · op(B) +
// beta · C, op(A) [m, k], op(B) [k, n]; matrix i of a batch starts i·stride elements in.
struct ColGemm {
  bool ta, tb;
  int m, n, k;
  float alpha;
  const float* A;
  int lda;
  long long sa;
  const float* B;
  int ldb;
  long long sb;
  float beta;
  float* C;
  int ldc;
  long long sc;
  int batch;
};

// Row-major C[M, N] = alpha · op(A) · op(B) + beta · C, with lda/ldb/ldc the row strides of A, B
// and C as stored. A row-major matrix read column-major is its transpose, so cuBLAS computes
// Cᵀ = op(B)ᵀ · op(A)ᵀ on the same memory: swap the operands and the sizes M and N.
inline ColGemm row_major(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                         int lda, long long sa, const float* B, int ldb, long long sb, float beta,
                         float* C, int ldc, long long sc, int batch) {
  return {tb, ta, N, M, K, alpha, B, ldb, sb, A, lda, sa, beta, C, ldc, sc, batch};
}
inline ColGemm row_major(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                         int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  return row_major(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

// out = inp · Wᵀ (+ bias): inp [N, C], weight [OC, C], out [N, OC].
template <class X>
void linear_forward(X& x, float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
  x.gemm(row_major(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC),
         "linear_forward (sgemm)");
  if (bias) x.add_bias(out, bias, N, OC);
}

// dinp += dout · W; dweight += doutᵀ · inp; dbias += Σ dout.
template <class X>
void linear_backward(X& x, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  if (dinp) {
    x.gemm(row_major(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C),
           "linear_backward dinp (sgemm)");
  }
  if (dweight) {
    x.gemm(row_major(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C),
           "linear_backward dweight (sgemm)");
  }
  if (dbias) x.bias_backward(dbias, dout, N, OC);
}

// Causal self-attention, qkv [B, T, 3C] (q, k, v of head h at columns h·hs of each third),
// att [B, NH, T, T], out [B, T, C]. Per sequence the NH heads form one strided batch.
template <class X>
void attention_forward(X& x, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long tt = static_cast<long long>(T) * T;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<size_t>(b) * T * ld;
    float* a = att + static_cast<size_t>(b) * NH * tt;
    x.gemm(row_major(false, true, T, T, hs, scale, q, ld, hs, q + C, ld, hs, 0.0f, a, T, tt, NH),
           "attention scores (sgemm)");
  }
  x.causal_softmax_forward(att, B * NH * T, T);
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<size_t>(b) * T * ld + 2 * C;
    const float* a = att + static_cast<size_t>(b) * NH * tt;
    float* o = out + static_cast<size_t>(b) * T * C;
    x.gemm(row_major(false, false, T, hs, T, 1.0f, a, T, tt, v, ld, hs, 0.0f, o, C, hs, NH),
           "attention values (sgemm)");
  }
}

template <class X>
void attention_backward(X& x, float* dqkv, const float* dout, const float* qkv, const float* att,
                        int B, int T, int C, int NH) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long tt = static_cast<long long>(T) * T;
  auto datt =
      x.scratch(static_cast<size_t>(NH) * static_cast<size_t>(tt), "scratch.attention.datt");
  float* d = datt.data();
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * T * ld;
    const float* q = qkv + base;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + base;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = att + static_cast<size_t>(b) * NH * tt;
    const float* dy = dout + static_cast<size_t>(b) * T * C;
    // datt = dout · vᵀ ; dv += attᵀ · dout
    x.gemm(row_major(false, true, T, T, hs, 1.0f, dy, C, hs, v, ld, hs, 0.0f, d, T, tt, NH),
           "attention backward datt (sgemm)");
    x.gemm(row_major(true, false, T, hs, T, 1.0f, a, T, tt, dy, C, hs, 1.0f, dv, ld, hs, NH),
           "attention backward dv (sgemm)");
    x.causal_softmax_backward(d, a, NH * T, T, scale);
    // dq += dscore · k ; dk += dscoreᵀ · q
    x.gemm(row_major(false, false, T, hs, T, 1.0f, d, T, tt, k, ld, hs, 1.0f, dq, ld, hs, NH),
           "attention backward dq (sgemm)");
    x.gemm(row_major(true, false, T, hs, T, 1.0f, d, T, tt, q, ld, hs, 1.0f, dk, ld, hs, NH),
           "attention backward dk (sgemm)");
  }
}

}  // namespace fl::cuda::plan
