// The 16-bit tensor-core GEMMs (cublasGemmEx / cublasGemmStridedBatchedEx, fp16 or bf16 operands,
// fp32 accumulation and output) on a GPU, for fl-train --precision fp16|bf16 on a CUDA device.
// Skips without a CUDA device (and bf16 without compute capability 8.0).
//
// Tolerances. Linear, with inputs exact in the 16-bit format: the GEMM's products are exact in
// fp32 accumulation and only the summation order differs from the CPU's fp32 op (OpenBLAS), as
// for fp32 SGEMM: 1e-5 of the output's largest magnitude. Attention, against the same 16-bit plan
// run on the CPU (tests/kernels/cublas_reference.hpp) from the same qkv: the probabilities agree to
// 1e-5 (the softmax kernels sum in another order), but the probabilities and the score gradient
// are GEMM inputs rounded to 16 bits, and a last-ulp fp32 difference can round one of them to the
// neighbouring 16-bit value (relative u = 2^-8 bf16, 2^-11 fp16): Δout = Σ_s Δa_s·v_s ≤
// u·Σ_s a_s·|v_s| ≤ u·max|v| (Σ_s a_s = 1), so 2u of the largest magnitude (the gradients are
// sums of the same kind).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/gemm_plan.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/cublas_reference.hpp"
#include "tests/support/close.hpp"
#include "tests/support/random.hpp"

namespace fl {
// Named, not anonymous: this file shares a unity translation unit with cuda_ops_test.cpp, whose
// helpers have the same names.
namespace gemm16_test {

const Device kGpu = Device::cuda(0);
using test::randn;

class CudaGemm16 : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    if (GetParam() == DType::kBF16 && cuda_compute_capability(0) < 80) {
      GTEST_SKIP() << "bf16 tensor-core GEMMs need compute capability 8.0";
    }
  }
  DType f() const { return GetParam(); }
  double unit() const { return GetParam() == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048; }
  std::vector<float> exact(std::vector<float> v) const {
    ops::round_to_precision(v.data(), v.size(), f());
    return v;
  }
};

Tensor up(const std::vector<float>& h) {
  DeviceGuard g(kGpu);
  Tensor d = Tensor::zeros({static_cast<int64_t>(h.size())}, DType::kF32, "test",
                           MemoryAccountant::cuda(0));
  ops::from_host(d.raw(), h.data(), h.size() * sizeof(float));
  return d;
}
std::vector<float> down(const Tensor& d) {
  DeviceGuard g(kGpu);
  std::vector<float> h(d.numel());
  ops::to_host(h.data(), d.raw(), h.size() * sizeof(float));
  return h;
}
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const char* what) {
  test::expect_all_close(got, want, rel, what, true, "gpu");
}

constexpr int B = 2, T = 24, C = 64, NH = 4, N = B * T, OC = 96;

TEST_P(CudaGemm16, LinearOnExactInputsMatchesTheCpuOp) {
  auto inp = exact(randn(N * C, 1)), w = exact(randn(OC * C, 2, 0.1f)), b = randn(OC, 3),
       dout = exact(randn(N * OC, 4));
  std::vector<float> out(N * OC), dinp(N * C, 0.25f), dw(OC * C, 0.0f), db(OC, 1.0f);
  ops::linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  ops::linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
  Tensor ginp = up(inp), gw = up(w), gb = up(b), gdout = up(dout),
         gout = up(std::vector<float>(N * OC, 9.0f)), gdinp = up(std::vector<float>(N * C, 0.25f)),
         gdw = up(std::vector<float>(OC * C)), gdb = up(std::vector<float>(OC, 1.0f));
  {
    DeviceGuard g(kGpu);
    ops::GemmPrecisionGuard p(f());
    ops::linear_forward(gout.f32(), ginp.f32(), gw.f32(), gb.f32(), N, C, OC);
    ops::linear_backward(gdinp.f32(), gdw.f32(), gdb.f32(), gdout.f32(), ginp.f32(), gw.f32(), N, C,
                         OC);
  }
  expect_close(down(gout), out, 1e-5, "16-bit linear_forward");
  expect_close(down(gdinp), dinp, 1e-5, "16-bit linear_backward dinp");
  expect_close(down(gdw), dw, 1e-5, "16-bit linear_backward dweight");
  expect_close(down(gdb), db, 1e-5, "linear_backward dbias");
}

// Inputs that are not exact in the format are rounded on the way in (as autocast does): the GPU
// GEMM equals the CPU op on the rounded inputs, not on the originals.
TEST_P(CudaGemm16, LinearRoundsItsInputsToTheFormat) {
  auto inp = randn(N * C, 5), w = randn(OC * C, 6, 0.1f);
  std::vector<float> want(N * OC);
  ops::linear_forward(want.data(), exact(inp).data(), exact(w).data(), nullptr, N, C, OC);
  Tensor ginp = up(inp), gw = up(w), gout = up(std::vector<float>(N * OC));
  {
    DeviceGuard g(kGpu);
    ops::GemmPrecisionGuard p(f());
    ops::linear_forward(gout.f32(), ginp.f32(), gw.f32(), nullptr, N, C, OC);
  }
  expect_close(down(gout), want, 1e-5, "16-bit linear_forward of unrounded inputs");
}

TEST_P(CudaGemm16, AttentionMatchesTheSameSixteenBitPlanOnTheCpu) {
  auto qkv = exact(randn(N * 3 * C, 7)), dy = exact(randn(N * C, 8));
  test::ReferenceExec ref;
  ref.format = static_cast<cuda::plan::Operands>(f());
  std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C, 0.125f);
  cuda::plan::attention_forward(ref, out.data(), att.data(), qkv.data(), B, T, C, NH);
  cuda::plan::attention_backward(ref, dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
  Tensor gqkv = up(qkv), gdy = up(dy), gout = up(std::vector<float>(N * C)),
         gatt = up(std::vector<float>(B * NH * T * T)),
         gdqkv = up(std::vector<float>(N * 3 * C, 0.125f));
  {
    DeviceGuard g(kGpu);
    ops::GemmPrecisionGuard p(f());
    ops::attention_forward(gout.f32(), gatt.f32(), gqkv.f32(), B, T, C, NH);
    ops::attention_backward(gdqkv.f32(), gdy.f32(), gqkv.f32(), gatt.f32(), B, T, C, NH);
  }
  expect_close(down(gatt), att, 1e-5, "16-bit attention probabilities");
  expect_close(down(gout), out, 2 * unit(), "16-bit attention_forward");
  expect_close(down(gdqkv), dqkv, 2 * unit(), "16-bit attention_backward");
}

std::string format_name(const ::testing::TestParamInfo<DType>& p) {
  return std::string(dtype_name(p.param));
}
INSTANTIATE_TEST_SUITE_P(Formats, CudaGemm16, ::testing::Values(DType::kF16, DType::kBF16),
                         format_name);

}  // namespace gemm16_test
}  // namespace fl
