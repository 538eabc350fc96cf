// The CUDA path's GEMM layout (kernels/cuda/gemm_plan.hpp) executed on the CPU against a
// reference of cuBLAS's column-major semantics (tests/kernels/cublas_reference.hpp), compared with
// the CPU ops: if a transposition, a leading dimension or a batch stride were wrong, linear and
// attention would differ here, on every machine, without a GPU. The softmax steps run the
// semantics documented for the CUDA kernels (kernels/cuda/launch.hpp) in plain loops. The 16-bit
// path (cublasGemmEx) is checked the same way: with fp16/bf16 operands it must read exactly the
// elements the fp32 path reads, rounded to the format.
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

using CublasReference = test::ReferenceExec;  // cuBLAS by the book, softmax as documented
using cuda::plan::Operands;

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
  EXPECT_EQ(x.gemms, 2 + 4);  // one strided batch of all B·NH heads per product
  expect_close(gatt, att, "attention probabilities");
  expect_close(gout, out, "attention_forward");
  expect_close(gdqkv, dqkv, "attention_backward dq/dk/dv");
}

// Linear and attention, forward and backward, through the plan with executor `x`.
struct PlanOutputs {
  std::vector<float> out, dinp, dw, db, att, aout, dqkv;
};
PlanOutputs run_plan(CublasReference& x) {
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
  auto qkv = randn(N * 3 * C, 5), dy = randn(N * C, 6);
  PlanOutputs o{std::vector<float>(N * OC, 123.0f),   std::vector<float>(N * C, 0.5f),
                std::vector<float>(OC * C, -0.25f),   std::vector<float>(OC, 1.0f),
                std::vector<float>(B * NH * T * T),   std::vector<float>(N * C),
                std::vector<float>(N * 3 * C, 0.125f)};
  cuda::plan::linear_forward(x, o.out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cuda::plan::linear_backward(x, o.dinp.data(), o.dw.data(), o.db.data(), dout.data(), inp.data(),
                              w.data(), N, C, OC);
  cuda::plan::attention_forward(x, o.aout.data(), o.att.data(), qkv.data(), B, T, C, NH);
  cuda::plan::attention_backward(x, o.dqkv.data(), dy.data(), qkv.data(), o.att.data(), B, T, C,
                                 NH);
  return o;
}

// The 16-bit plan (operands converted once per op, element offsets in 16-bit units) computes
// exactly what the fp32 plan computes when every value its GEMMs read is rounded to the format:
// the same values summed in the same order. A wrong offset, stride or forgotten conversion differs.
TEST(GemmPlan, SixteenBitOperandsReadTheSameElementsAsFp32) {
  for (Operands f : {Operands::kF16, Operands::kBF16}) {
    CublasReference sixteen;
    sixteen.format = f;
    CublasReference rounded;
    rounded.round_to = f;
    const PlanOutputs got = run_plan(sixteen), want = run_plan(rounded);
    const char* name = f == Operands::kF16 ? "fp16" : "bf16";
    EXPECT_EQ(got.out, want.out) << name << " linear_forward";
    EXPECT_EQ(got.dinp, want.dinp) << name << " linear_backward dinp";
    EXPECT_EQ(got.dw, want.dw) << name << " linear_backward dweight";
    EXPECT_EQ(got.db, want.db) << name << " linear_backward dbias";
    EXPECT_EQ(got.att, want.att) << name << " attention probabilities";
    EXPECT_EQ(got.aout, want.aout) << name << " attention_forward";
    EXPECT_EQ(got.dqkv, want.dqkv) << name << " attention_backward";
    EXPECT_EQ(sixteen.gemms, rounded.gemms);
    // linear: input and weight; dout, weight, input. attention: qkv (gathered into head layout)
    // and probabilities; qkv, dout (both gathered), probabilities and the score gradient.
    EXPECT_EQ(sixteen.conversions, 2 + 3 + 2 + 4) << name;
    EXPECT_EQ(rounded.conversions, 0);
  }
}

// What the gpu tests assert for 16-bit linear: with inputs that are exact in the format, a 16-bit
// GEMM with fp32 accumulation differs from the CPU's fp32 op only by summation order.
TEST(GemmPlan, SixteenBitLinearOnExactInputsMatchesTheCpuOp) {
  for (Operands f : {Operands::kF16, Operands::kBF16}) {
    auto inp = randn(N * C, 11), w = randn(OC * C, 12), dout = randn(N * OC, 13);
    for (auto* v : {&inp, &w, &dout}) ops::round_to_precision(v->data(), v->size(), DType(f));
    std::vector<float> out(N * OC), dinp(N * C, 0.5f), dw(OC * C, -0.25f);
    ops::linear_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
    ops::linear_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C,
                         OC);
    CublasReference x;
    x.format = f;
    std::vector<float> gout(N * OC), gdinp(N * C, 0.5f), gdw(OC * C, -0.25f);
    cuda::plan::linear_forward(x, gout.data(), inp.data(), w.data(), nullptr, N, C, OC);
    cuda::plan::linear_backward(x, gdinp.data(), gdw.data(), nullptr, dout.data(), inp.data(),
                                w.data(), N, C, OC);
    expect_close(gout, out, "16-bit linear_forward");
    expect_close(gdinp, dinp, "16-bit linear_backward dinp");
    expect_close(gdw, dw, "16-bit linear_backward dweight");
  }
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
  EXPECT_EQ(g.operands, Operands::kF32);
}

}  // namespace
}  // namespace fl
