// deepspeed.initialize's optimizer wrapper by DeepSpeed version
// (workloads/train/optimizer_wrapper.hpp): each branch of get_data_types and
// _do_optimizer_sanity_check as the tags wrote them, with DeepSpeed's words, and the pipeline
// engine's two bf16 calls.
#include "workloads/train/optimizer_wrapper.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"

namespace fl::train {
namespace {

WrapperInputs bf16(int stage, const std::string& accum = "", bool pipeline = false,
                   bool offload = false) {
  return {DType::kBF16, accum, stage, offload, pipeline};
}

// The ConfigError's text, or "" when the wrapper was chosen.
std::string refusal(const WrapperInputs& in, const std::string& ds) {
  try {
    optimizer_wrapper(in, ds);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OptimizerWrapper, DefaultAccumulationFollowsTheRelease) {
  EXPECT_EQ(grad_accum_dtype(bf16(0), "0.12.0"), DType::kF32);
  EXPECT_EQ(grad_accum_dtype(bf16(0), "0.17.5"), DType::kF32);
  EXPECT_EQ(grad_accum_dtype(bf16(0), "0.17.6"), DType::kBF16);
  EXPECT_EQ(grad_accum_dtype(bf16(0), ""), DType::kBF16);  // not stated: the newest
  EXPECT_EQ(grad_accum_dtype(bf16(2), "0.8.0"), DType::kBF16);
  EXPECT_EQ(grad_accum_dtype(bf16(2), "0.7.6"), DType::kF32);
  EXPECT_EQ(grad_accum_dtype(bf16(2, "fp32"), "0.19.0"), DType::kF32);
  EXPECT_EQ(grad_accum_dtype({DType::kF16, "", 0, false, false}, "0.9.0"), DType::kF16);
}

TEST(OptimizerWrapper, ZeroRefusedDifferentTypesUntil0_10_1) {
  const std::string words =
      "NotImplementedError: Model data type and gradient accumulation data type must be equal "
      "to use ZeRO";
  // 0.7.6's own default for bf16 under ZeRO (DeepSpeed#2569); 0.7.5 had no check, 0.7.7 fixed it.
  EXPECT_TRUE(has(refusal(bf16(2), "0.7.6"), words)) << refusal(bf16(2), "0.7.6");
  EXPECT_TRUE(has(refusal(bf16(2), "0.7.6"), "gradient accumulation fp32 (the default)"));
  EXPECT_EQ(optimizer_wrapper(bf16(2), "0.7.5"), OptimizerWrapper::kZero);
  EXPECT_EQ(optimizer_wrapper(bf16(2), "0.7.7"), OptimizerWrapper::kZero);
  EXPECT_TRUE(has(refusal(bf16(2, "fp32"), "0.10.0"), words));
  EXPECT_EQ(optimizer_wrapper(bf16(2, "fp32"), "0.10.1"), OptimizerWrapper::kZero);
  // bf16 with fp32 accumulation at stage 1 is BF16_Optimizer's from 0.8.1, not with offload from
  // 0.10.1.
  EXPECT_TRUE(has(refusal(bf16(1, "fp32"), "0.8.0"), words));
  EXPECT_EQ(optimizer_wrapper(bf16(1, "fp32"), "0.8.1"), OptimizerWrapper::kBf16);
  EXPECT_EQ(optimizer_wrapper(bf16(1, "fp32", false, true), "0.9.0"), OptimizerWrapper::kBf16);
  EXPECT_EQ(optimizer_wrapper(bf16(1, "fp32", false, true), "0.10.1"), OptimizerWrapper::kZero);
  EXPECT_EQ(optimizer_wrapper(bf16(1), ""), OptimizerWrapper::kZero);
  EXPECT_EQ(wrapper_class(OptimizerWrapper::kZero, 1), "DeepSpeedZeroOptimizer");
  EXPECT_EQ(wrapper_class(OptimizerWrapper::kZero, 3), "DeepSpeedZeroOptimizer_Stage3");
}

TEST(OptimizerWrapper, Bf16AccumulationWithoutZeroByRelease) {
  const std::string words =
      "NotImplementedError: Bfloat16 wrapper must use a gradient accumulation type of fp32, "
      "enable ZeRO to use Bfloat16 gradient accumulation";
  EXPECT_TRUE(has(refusal(bf16(0, "bf16", true), "0.12.4"), words));
  EXPECT_EQ(optimizer_wrapper(bf16(0, "bf16", true), "0.12.5"), OptimizerWrapper::kBf16);
  EXPECT_TRUE(has(refusal(bf16(0, "bf16", false), "0.17.5"), words));
  EXPECT_EQ(optimizer_wrapper(bf16(0, "bf16", false), "0.17.6"), OptimizerWrapper::kDdpBf16);
  EXPECT_EQ(optimizer_wrapper(bf16(0), "0.12.0"), OptimizerWrapper::kBf16);  // fp32 accumulation
  EXPECT_EQ(optimizer_wrapper(bf16(0, "fp32"), "0.18.4"), OptimizerWrapper::kBf16);
  EXPECT_TRUE(
      has(refusal(bf16(0, "fp32"), "0.18.5"),
          "unsupported mix of model_dtype=torch.bfloat16 and grad_accum_dtype=torch.float32"));
  EXPECT_EQ(optimizer_wrapper({DType::kF16, "", 0, false, false}, ""), OptimizerWrapper::kFp16);
  EXPECT_EQ(optimizer_wrapper({DType::kF32, "", 0, false, false}, ""), OptimizerWrapper::kNone);
}

TEST(OptimizerWrapper, AnUnsupportedMixNamesItAsEachReleaseSpelledIt) {
  const WrapperInputs fp16_fp32{DType::kF16, "fp32", 0, false, false};
  EXPECT_TRUE(has(refusal(fp16_fp32, "0.9.2"),
                  "unsupported mix of model dtype and gradient accummulation type"));
  EXPECT_TRUE(has(refusal(fp16_fp32, "0.9.3"),
                  "unsupported mix of model dtype and gradient accumulation type"));
  EXPECT_TRUE(
      has(refusal(fp16_fp32, "0.17.6"),
          "unsupported mix of model_dtype=torch.float16 and grad_accum_dtype=torch.float32"));
}

TEST(OptimizerWrapper, AnUnknownAccumulationTypeNamesTheKey) {
  const std::string text = refusal(bf16(1, "float8"), "");
  EXPECT_TRUE(has(text, "workload.grad_accum_dtype (--grad-accum-dtype) 'float8'")) << text;
  EXPECT_TRUE(has(text, "allowed: fp32, fp16, bf16")) << text;
}

TEST(OptimizerWrapper, BeforeRelease0_11_2APipelineCallsWhatOnlyBf16OptimizerHas) {
  const OptimizerWrapper zero = OptimizerWrapper::kZero, bf16o = OptimizerWrapper::kBf16;
  try {
    pipeline_clear_lp_grads(zero, 1, DType::kBF16, "0.11.1", 2);
    FAIL() << "DeepSpeedZeroOptimizer has clear_lp_grads";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(),
                    "AttributeError: 'DeepSpeedZeroOptimizer' object has no attribute "
                    "'clear_lp_grads' (rank 2:"))
        << e.what();
  }
  // 0.11.2 asks whether the optimizer is BF16_Optimizer before calling it.
  EXPECT_NO_THROW(pipeline_clear_lp_grads(zero, 1, DType::kBF16, "0.11.2", 0));
  EXPECT_NO_THROW(pipeline_clear_lp_grads(zero, 1, DType::kBF16, "", 0));
  EXPECT_NO_THROW(pipeline_clear_lp_grads(bf16o, 1, DType::kBF16, "0.9.2", 0));
  EXPECT_NO_THROW(pipeline_clear_lp_grads(zero, 1, DType::kF16, "0.9.2", 0));
  // ReduceGrads under bf16 at stage 1: not implemented before 0.9.2 whatever the wrapper
  // (DeepSpeed#2994); then BF16_Optimizer's get_grads_for_reduction until 0.11.2.
  EXPECT_THROW(pipeline_reduce_grads(bf16o, DType::kBF16, 1, "0.9.1", 0), Error);
  EXPECT_NO_THROW(pipeline_reduce_grads(bf16o, DType::kBF16, 1, "0.9.2", 0));
  EXPECT_NO_THROW(pipeline_reduce_grads(bf16o, DType::kBF16, 0, "0.8.0", 0));
  try {
    pipeline_reduce_grads(zero, DType::kBF16, 1, "0.10.0", 3);
    FAIL() << "DeepSpeedZeroOptimizer has get_grads_for_reduction";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(),
                    "'DeepSpeedZeroOptimizer' object has no attribute "
                    "'get_grads_for_reduction' (rank 3:"))
        << e.what();
  }
  EXPECT_NO_THROW(pipeline_reduce_grads(zero, DType::kBF16, 1, "0.11.2", 0));
  EXPECT_NO_THROW(pipeline_reduce_grads(zero, DType::kF16, 1, "0.8.0", 0));
}

}  // namespace
}  // namespace fl::train
