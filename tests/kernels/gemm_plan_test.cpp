// The CUDA path's GEMM layout (kernels/cuda/gemm_plan.hpp) executed on the CPU against a
// reference of cuBLAS's column-major SGEMM semantics, compared with the CPU ops: if a
// transposition, a leading dimension or a batch stride were wrong, linear and attention would
// differ here, on every machine, without a GPU. The softmax steps run the semantics documented for
// the CUDA kernels (kernels/cuda/launch.hpp) in plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/gemm_plan.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/cublas_reference.hpp"
#include "tests/support/random.hpp"

namespace fl {
namespace {

using cuda::plan::ColGemm;

// cuBLAS by the book (tests/kernels/cublas_reference.hpp); the softmax steps as documented.
struct CublasReference {
  int gemms = 0;
  void gemm(const ColGemm& g, const char*) {
    ++gemms;
    test::reference_gemm(g);
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

using test::randn;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double maxabs = 0;
  for (float w : want) maxabs = std::max(maxabs, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * maxabs + 1e-6) << what << " element " << i;
  }
}

// Non-square, non-power-of-two sizes so that swapped dimensions or strides cannot coincide.
constexpr int B = 3, T = 7, C = 24, NH = 3, N = B * T, OC = 40;

TEST(GemmPlan, LinearMatchesTheCpuOps) {
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
  std::vector<float> out(N * OC), dinp(N * C, 0.5f), dw(OC * C, -0.25f), db(OC, 1.0f);
  ops::linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  ops::linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
  CublasReference x;
  std::vector<float> gout(N * OC, 123.0f), gdinp(N * C, 0.5f), gdw(OC * C, -0.25f), gdb(OC, 1.0f);
  cuda::plan::linear_forward(x, gout.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cuda::plan::linear_backward(x, gdinp.data(), gdw.data(), gdb.data(), dout.data(), inp.data(),
                              w.data(), N, C, OC);
  EXPECT_EQ(x.gemms, 3);
  expect_close(gout, out, "linear_forward (beta 0 overwrites)");
  expect_close(gdinp, dinp, "linear_backward dinp (accumulates)");
  expect_close(gdw, dw, "linear_backward dweight (accumulates)");
  expect_close(gdb, db, "linear_backward dbias");
}

TEST(GemmPlan, AttentionMatchesTheCpuOps) {
  auto qkv = randn(N * 3 * C, 5), dout = randn(N * C, 6);
  std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C, 0.125f);
  ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  ops::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  CublasReference x;
  std::vector<float> gout(N * C, 9.0f), gatt(B * NH * T * T, 9.0f), gdqkv(N * 3 * C, 0.125f);
  cuda::plan::attention_forward(x, gout.data(), gatt.data(), qkv.data(), B, T, C, NH);
  cuda::plan::attention_backward(x, gdqkv.data(), dout.data(), qkv.data(), gatt.data(), B, T, C,
                                 NH);
  EXPECT_EQ(x.gemms, 2 * B + 4 * B);  // one strided batch of NH heads per sequence and product
  expect_close(gatt, att, "attention probabilities");
  expect_close(gout, out, "attention_forward");
  expect_close(gdqkv, dqkv, "attention_backward dq/dk/dv");
}

TEST(GemmPlan, RowMajorSwapsOperandsAndSizes) {
  float a = 0, b = 0, c = 0;
  const ColGemm g = cuda::plan::row_major(true, false, 5, 6, 7, 2.0f, &a, 11, 13, &b, 17, 19, 1.0f,
                                          &c, 23, 29, 31);
  EXPECT_FALSE(g.ta);  // op on B (not transposed) first
  EXPECT_TRUE(g.tb);   // then op on A (transposed)
  EXPECT_EQ(g.m, 6);
  EXPECT_EQ(g.n, 5);
  EXPECT_EQ(g.k, 7);
  EXPECT_EQ(g.A, &b);
  EXPECT_EQ(g.lda, 17);
  EXPECT_EQ(g.sa, 19);
  EXPECT_EQ(g.B, &a);
  EXPECT_EQ(g.ldb, 11);
  EXPECT_EQ(g.sb, 13);
  EXPECT_EQ(g.ldc, 23);
  EXPECT_EQ(g.sc, 29);
  EXPECT_EQ(g.batch, 31);
}

}  // namespace
}  // namespace fl
