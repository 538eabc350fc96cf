// Which optimizer wrapper deepspeed.initialize puts around the client's optimizer, from the
// model's data type, the gradient-accumulation data type (the config's
// data_types.grad_accum_dtype), the ZeRO stage, optimizer offload and whether the model is a
// PipelineModule: engine.py's get_data_types and _do_optimizer_sanity_check, as each DeepSpeed
// release wrote them (read at the tags v0.7.5 to v0.19.5):
//
//   default accumulation   bf16 without ZeRO: fp32 before 0.17.6 (0.7.6: with ZeRO too);
//                          otherwise the model's type
//   ZeRO (stage >= 1)      bf16 with fp32 accumulation at stage 1 (from 0.10.1 without optimizer
//                          offload): BF16_Optimizer, from 0.8.1; types that differ otherwise:
//                          NotImplementedError until 0.10.0, DeepSpeedZeroOptimizer after;
//                          everything else: DeepSpeedZeroOptimizer (_Stage3 at stage 3)
//   no ZeRO                fp32: none; fp16: FP16_Optimizer; bf16 with fp32 accumulation:
//                          BF16_Optimizer until 0.18.4, then NotImplementedError; bf16 with bf16
//                          accumulation: NotImplementedError,
//                          from 0.12.5 BF16_Optimizer for a pipeline, from 0.17.6 the
//                          DDP-style bf16 wrapper otherwise; any other mix: NotImplementedError
//
// Before 0.7.6 there was no data_types section: ZeRO's optimizer at stage >= 1, else the
// precision's own wrapper. 0.7.6 also gave bf16 under ZeRO fp32 accumulation by default, which
// its ZeRO check refused (DeepSpeed#2569).
//
// Before 0.11.2 the pipeline engine assumed BF16_Optimizer under bf16: before each backward on a
// stage that is not the last it calls optimizer.clear_lp_grads(), which DeepSpeedZeroOptimizer
// does not have (DeepSpeed#3693), and its ReduceGrads asks for BF16_Optimizer's fp32 gradients;
// 0.11.2 checks the optimizer's type instead (using_bf16_optimizer). A PipelineModule is taken to
// be pp > 1: Megatron-DeepSpeed's one-stage PipelineModule is not modelled.
#pragma once

#include <string>

#include "base/dtype.hpp"

namespace fl::train {

enum class OptimizerWrapper { kNone, kFp16, kBf16, kDdpBf16, kZero };

struct WrapperInputs {
  DType model = DType::kF32;  // fp32, fp16 or bf16 (the config's fp16/bf16 sections)
  std::string grad_accum;     // data_types.grad_accum_dtype: "" (not set), fp32, fp16, bf16
  int zero_stage = 0;
  bool offload_optimizer = false;
  bool pipeline = false;  // a PipelineModule (pp > 1)
};

// get_data_types' gradient-accumulation type for DeepSpeed `deepspeed` ("": the newest).
DType grad_accum_dtype(const WrapperInputs& in, const std::string& deepspeed);

// _do_optimizer_sanity_check's wrapper; a combination DeepSpeed refuses raises ConfigError with
// its NotImplementedError. A grad_accum that is not one of the allowed names raises ConfigError
// naming workload.grad_accum_dtype.
OptimizerWrapper optimizer_wrapper(const WrapperInputs& in, const std::string& deepspeed);

// The wrapper's class name ("DeepSpeedZeroOptimizer", "BF16_Optimizer", ...; "" for none).
std::string wrapper_class(OptimizerWrapper w, int zero_stage);

// The pipeline engine's pre-backward call on a stage that is not the last, under bf16 before
// 0.11.2: nothing for BF16_Optimizer; for another wrapper the AttributeError Python raises (rank
// in the text). From 0.11.2 the engine asks for BF16_Optimizer itself and skips the call.
void pipeline_clear_lp_grads(OptimizerWrapper w, int zero_stage, DType model,
                             const std::string& deepspeed, int rank);

// The pipeline engine's ReduceGrads (after a stage's last backward, on every stage) under bf16
// before 0.11.2: a bare NotImplementedError at ZeRO stage 1 before 0.9.2 (DeepSpeed#2994),
// whichever wrapper was chosen; from 0.9.2 the AttributeError of asking a wrapper other than
// BF16_Optimizer for get_grads_for_reduction.
void pipeline_reduce_grads(OptimizerWrapper w, DType model, int zero_stage,
                           const std::string& deepspeed, int rank);

}  // namespace fl::train
