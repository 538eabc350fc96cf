// Which GEMMs a rank runs: 16-bit tensor-core GEMMs only on a CUDA rank training in fp16/bf16
// (FAULTLINE_GEMM_PRECISION=auto), fp32 everywhere else; bad values and CPU misuse are refused
// with a message naming what is allowed. No GPU needed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "workloads/train/trainer.hpp"

namespace fl {
namespace {

using train::gemm_precision_for;

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(GemmPrecision, SixteenBitOnlyForACudaRankInReducedPrecision) {
  EXPECT_EQ(gemm_precision_for(DType::kBF16, Device::cpu(), "auto"), DType::kF32);
  EXPECT_EQ(gemm_precision_for(DType::kF16, Device::cpu(), "auto"), DType::kF32);
  EXPECT_EQ(gemm_precision_for(DType::kF32, Device::cuda(0), "auto"), DType::kF32);
  EXPECT_EQ(gemm_precision_for(DType::kBF16, Device::cuda(0), "fp32"), DType::kF32);
  EXPECT_EQ(gemm_precision_for(DType::kF16, Device::cuda(0), "fp32"), DType::kF32);
  if (cuda_compute_capability(0) >= 80) {
    EXPECT_EQ(gemm_precision_for(DType::kBF16, Device::cuda(0), "auto"), DType::kBF16);
  }
}

TEST(GemmPrecision, AnUnknownSettingNamesWhatIsAllowed) {
  EXPECT_EQ(config_error([] { gemm_precision_for(DType::kBF16, Device::cuda(0), "tf32"); }),
            "FAULTLINE_GEMM_PRECISION=tf32 is not allowed (allowed: auto, fp32)");
}

TEST(GemmPrecision, OnlyFloatFormatsAreGemmPrecisions) {
  EXPECT_EQ(config_error([] { ops::set_gemm_precision(DType::kI32); }),
            "GEMM precision int32 is not supported (allowed: fp32, fp16, bf16)");
  EXPECT_EQ(ops::gemm_precision(), DType::kF32);
}

// The CPU is the fp32 reference: its GEMM ops refuse a 16-bit GEMM precision instead of silently
// computing in fp32, and run unchanged once the guard is gone.
TEST(GemmPrecision, CpuGemmOpsRefuseSixteenBitAndNameTheAlternative) {
  const int N = 2, C = 3, OC = 4;
  std::vector<float> inp(N * C, 1.0f), w(OC * C, 0.5f), out(N * OC), qkv(N * 3 * C), att(N * N);
  {
    ops::GemmPrecisionGuard g(DType::kBF16);
    EXPECT_EQ(config_error([&] {
                ops::linear_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
              }),
              "linear_forward: bf16 GEMMs (tensor cores) are not supported on the cpu device "
              "(allowed there: fp32); 16-bit GEMMs need a cuda device");
    EXPECT_NE(config_error([&] {
                ops::attention_forward(out.data(), att.data(), qkv.data(), 1, N, C, 1);
              }).find("attention_forward: bf16 GEMMs"),
              std::string::npos);
  }
  EXPECT_EQ(ops::gemm_precision(), DType::kF32);
  ops::linear_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
}

}  // namespace
}  // namespace fl
