// Sharded inference of the GPT: tensor- and pipeline-parallel forward with a per-layer KV cache,
// one token per step for a batch of requests, greedy or seeded top-k sampling. TP ranks compute
// identical logits (replicated head on identical, all-reduced inputs) and draw from the same
// counter-based generator, so they must produce identical tokens; the engine checks that they do.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/model/params.hpp"
#include "workloads/parallel/topology.hpp"

namespace fl::infer {

struct GenerateConfig {
  int max_new_tokens = 16;
  int top_k = 0;  // 0: greedy
  float temperature = 1.0f;
  uint64_t seed = 1;
};

// Raised when tensor-parallel ranks generated different tokens (diverging TP outputs).
class OutputMismatchError : public Error {
 public:
  using Error::Error;
};

class InferenceEngine {
 public:
  // `params` is this rank's shard (ParamLayout of its TP rank and PP stage), copied to the device
  // of `acct`.
  InferenceEngine(const model::GptConfig& cfg, parallel::Topology& topo, std::vector<float> params,
                  MemoryAccountant& acct);

  // Every prompt must have the same length; returns prompt + generated tokens per request, on
  // every rank. Throws OutOfMemoryError if the KV cache does not fit the budget.
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateConfig& g);
  // Tensor-parallel ranks must agree token for token: compares `out` across the TP group and
  // throws OutputMismatchError naming the first differing request and position.
  void check_tp_agreement(const std::vector<std::vector<int32_t>>& out);
  // Called after every generated position with its index (0-based) and wall time.
  // Called per generated position with its wall time and the part spent in collectives.
  using StepSink = std::function<void(int64_t pos, double seconds, double comm_seconds)>;
  void set_step_sink(StepSink sink) { sink_ = std::move(sink); }
  const model::ParamLayout& layout() const { return layout_; }

 private:
  // One position for the whole batch: tokens [B] at position t; returns next tokens (all ranks).
  std::vector<int32_t> step(const std::vector<int32_t>& tokens, int t, bool sample,
                            const GenerateConfig& g, int64_t draw);
  void tp_all_reduce(float* x, size_t n);

  model::GptConfig cfg_;
  parallel::Topology& topo_;
  model::ParamLayout layout_;
  MemoryAccountant& acct_;
  // Weights and per-step activations live on the rank's device outside its budget (as the host
  // vectors they are on CPU ranks); the KV cache is charged to the budget.
  MemoryAccountant staging_;
  Tensor params_;
  int B_ = 0;
  StepSink sink_;
  std::vector<Tensor> kcache_, vcache_;  // per local layer: [B, NH_l, T, hs]
};

// Next token from logits [V]: argmax, or top-k sampling at `temperature` with a uniform drawn
// from (seed, request, position).
int32_t sample_token(const float* logits, int V, const GenerateConfig& g, int request,
                     int64_t position);

}  // namespace fl::infer
