// DeepSpeed's optimizer wrapper by version (optimizer_wrapper.hpp).
#include "workloads/train/optimizer_wrapper.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "kernels/versions.hpp"

namespace fl::train {

namespace {

const char* torch_dtype(DType t) {
  switch (t) {
    case DType::kF16:
      return "torch.float16";
    case DType::kBF16:
      return "torch.bfloat16";
    default:
      return "torch.float32";
  }
}

const char* short_name(DType t) {
  return t == DType::kF16 ? "fp16" : t == DType::kBF16 ? "bf16" : "fp32";
}

bool older(const std::string& ds, int major, int minor, int patch) {
  return ops::stated_and_older(ds, major, minor, patch);
}

// What was asked, after DeepSpeed's words.
std::string asked(const WrapperInputs& in, DType accum) {
  return fmt::format(
      "(deepspeed.initialize's optimizer sanity check: {} model, gradient accumulation {}{}, "
      "ZeRO stage {}{})",
      short_name(in.model), short_name(accum), in.grad_accum.empty() ? " (the default)" : "",
      in.zero_stage, in.pipeline ? ", a PipelineModule" : "");
}

[[noreturn]] void refuse(const std::string& words, const WrapperInputs& in, DType accum) {
  raise<ConfigError>("NotImplementedError: {} {}", words, asked(in, accum));
}

OptimizerWrapper with_zero(const WrapperInputs& in, DType accum, const std::string& ds) {
  const bool bf16_fp32 = in.model == DType::kBF16 && accum == DType::kF32;
  // 0.8.1 sends bf16 with fp32 accumulation at stage 1 to BF16_Optimizer; 0.10.1 keeps ZeRO's
  // optimizer when the optimizer is offloaded.
  if (bf16_fp32 && in.zero_stage == 1 && !older(ds, 0, 8, 1) &&
      (older(ds, 0, 10, 1) || !in.offload_optimizer)) {
    return OptimizerWrapper::kBf16;
  }
  if (in.model != accum && older(ds, 0, 10, 1)) {
    refuse("Model data type and gradient accumulation data type must be equal to use ZeRO", in,
           accum);
  }
  return OptimizerWrapper::kZero;
}

OptimizerWrapper without_zero(const WrapperInputs& in, DType accum, const std::string& ds) {
  if (in.model == accum) {
    if (in.model == DType::kF32) return OptimizerWrapper::kNone;
    if (in.model == DType::kF16) return OptimizerWrapper::kFp16;
    if (in.pipeline && !older(ds, 0, 12, 5)) return OptimizerWrapper::kBf16;  // with a warning
    if (!older(ds, 0, 17, 6)) return OptimizerWrapper::kDdpBf16;
    refuse(
        "Bfloat16 wrapper must use a gradient accumulation type of fp32, enable ZeRO to use "
        "Bfloat16 gradient accumulation",
        in, accum);
  }
  // 0.18.5 took the fallback out (DeepSpeed#7790): BF16_Optimizer is ZeRO stage 1's.
  if (in.model == DType::kBF16 && accum == DType::kF32 && older(ds, 0, 18, 5)) {
    return OptimizerWrapper::kBf16;
  }
  if (!older(ds, 0, 17, 6)) {
    refuse(fmt::format("unsupported mix of model_dtype={} and grad_accum_dtype={}",
                       torch_dtype(in.model), torch_dtype(accum)),
           in, accum);
  }
  refuse(older(ds, 0, 9, 3) ? "unsupported mix of model dtype and gradient accummulation type"
                            : "unsupported mix of model dtype and gradient accumulation type",
         in, accum);
}

}  // namespace

DType grad_accum_dtype(const WrapperInputs& in, const std::string& deepspeed) {
  if (in.grad_accum == "fp32") return DType::kF32;
  if (in.grad_accum == "fp16") return DType::kF16;
  if (in.grad_accum == "bf16") return DType::kBF16;
  if (!in.grad_accum.empty()) {
    raise<ConfigError>(
        "workload.grad_accum_dtype (--grad-accum-dtype) '{}' is not a data type DeepSpeed "
        "accumulates gradients in (allowed: fp32, fp16, bf16, or unset for DeepSpeed's default)",
        in.grad_accum);
  }
  // 0.7.6 gave bf16 fp32 accumulation under ZeRO too, which its own check then refused
  // (DeepSpeed#2569); 0.7.7 to 0.17.5 only without ZeRO.
  if (in.model == DType::kBF16 && older(deepspeed, 0, 17, 6) &&
      (in.zero_stage == 0 || older(deepspeed, 0, 7, 7))) {
    return DType::kF32;
  }
  return in.model;
}

OptimizerWrapper optimizer_wrapper(const WrapperInputs& in, const std::string& deepspeed) {
  const DType accum = grad_accum_dtype(in, deepspeed);
  if (older(deepspeed, 0, 7, 6)) {
    // Before data_types existed: ZeRO's optimizer, else the precision's own wrapper.
    if (in.zero_stage >= 1) return OptimizerWrapper::kZero;
    return in.model == DType::kF16    ? OptimizerWrapper::kFp16
           : in.model == DType::kBF16 ? OptimizerWrapper::kBf16
                                      : OptimizerWrapper::kNone;
  }
  return in.zero_stage >= 1 ? with_zero(in, accum, deepspeed) : without_zero(in, accum, deepspeed);
}

std::string wrapper_class(OptimizerWrapper w, int zero_stage) {
  switch (w) {
    case OptimizerWrapper::kFp16:
      return "FP16_Optimizer";
    case OptimizerWrapper::kBf16:
      return "BF16_Optimizer";
    case OptimizerWrapper::kDdpBf16:
      return "FP16_Optimizer";  // DDP_BFLOAT16 is FP16_Optimizer over bf16 parameters
    case OptimizerWrapper::kZero:
      return zero_stage >= 3 ? "DeepSpeedZeroOptimizer_Stage3" : "DeepSpeedZeroOptimizer";
    case OptimizerWrapper::kNone:
      break;
  }
  return "";
}

void pipeline_clear_lp_grads(OptimizerWrapper w, int zero_stage, DType model,
                             const std::string& deepspeed, int rank) {
  // 0.11.2 asks whether the optimizer is BF16_Optimizer (using_bf16_optimizer), not whether the
  // model is bf16.
  if (model != DType::kBF16 || w == OptimizerWrapper::kBf16 || !older(deepspeed, 0, 11, 2)) return;
  raise(
      "AttributeError: '{}' object has no attribute 'clear_lp_grads' (rank {}: before DeepSpeed "
      "0.11.2 the pipeline engine's backward on a stage that is not the last calls "
      "clear_lp_grads under bf16, a BF16_Optimizer method; deepspeed.initialize chose {} for "
      "this model's data types)",
      wrapper_class(w, zero_stage), rank, wrapper_class(w, zero_stage));
}

void pipeline_reduce_grads(OptimizerWrapper w, DType model, int zero_stage,
                           const std::string& deepspeed, int rank) {
  if (model != DType::kBF16 || !older(deepspeed, 0, 11, 2)) return;
  if (zero_stage >= 1 && older(deepspeed, 0, 9, 2)) {
    raise(
        "NotImplementedError (rank {}: the pipeline engine's ReduceGrads under bf16 has a path "
        "for ZeRO stage 0 only; at stage 1 it asserts 'only bf16 + z1 are supported' and raises "
        "NotImplementedError() before DeepSpeed 0.9.2)",
        rank);
  }
  // The bf16 path reduces the fp32 gradients BF16_Optimizer hands out.
  if (w == OptimizerWrapper::kBf16) return;
  raise(
      "AttributeError: '{}' object has no attribute 'get_grads_for_reduction' (rank {}: before "
      "DeepSpeed 0.11.2 the pipeline engine's ReduceGrads under bf16 asks the optimizer for "
      "BF16_Optimizer's fp32 gradients; deepspeed.initialize chose {})",
      wrapper_class(w, zero_stage), rank, wrapper_class(w, zero_stage));
}

}  // namespace fl::train
