// Sharded inference of the GPT: tensor- and pipeline-parallel forward with a per-layer KV cache,
// one token per step for a batch of requests, greedy or seeded sampling (temperature, top-k,
// top-p). TP ranks compute identical logits (replicated head on identical, all-reduced inputs)
// and draw from the same counter-based generator, so they must produce identical tokens; the
// engine checks that they do. One engine serves many generate() calls, as a server does: the KV
// cache and its position count live in the engine between calls, and when they are emptied is
// the engine's policy (CacheReset), so a cache left over from the previous call can be the cause.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/model/params.hpp"
#include "workloads/parallel/topology.hpp"

namespace fl::infer {

struct GenerateConfig {
  int max_new_tokens = 16;
  int top_k = 0;       // sample among the k most likely tokens (0: every token)
  float top_p = 1.0f;  // then among the smallest set whose probability reaches p (1: off)
  float temperature = 1.0f;
  uint64_t seed = 1;
  int eos = -1;  // a request ends at this token (padded with it after); -1: none
  // A prompt plus max_new_tokens past the model's context: "refuse" (a ConfigError before the
  // first forward), "clamp" (generate up to the context and say so, as HF's generate stops at
  // max_length) or "none" (no check: the generate loop runs into the position embedding's end
  // and fails mid-generation, the flaw of a loop that trusts its max_new_tokens).
  std::string context_limit = "refuse";
  // Greedy (argmax) unless top_k or top_p selects sampling, as HF's do_sample=False.
  bool sampling() const { return top_k > 0 || top_p < 1.0f; }
};

// When the KV cache is emptied (its position count set back to 0).
enum class CacheReset {
  kGenerate,  // at the start of every generate() call (HF generate, vLLM, DeepSpeed since #2669)
  kPrompt,    // when a forward call carries more than one token: DeepSpeed's kernels before
              // #2669 took only those for a new prompt, so a one-token prompt continued the cache
  kNever,     // never: every call continues the previous call's positions
};
// "generate", "prompt", "never"; ConfigError naming `option` and what is allowed otherwise.
CacheReset parse_cache_reset(const std::string& word, const char* option);

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
  // every rank (requests that ended at eos padded with it). Throws OutOfMemoryError if the KV
  // cache does not fit the budget, and PyTorch's "index out of range in self" when a position
  // passes the context (a cache that was not emptied keeps counting from the previous call).
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateConfig& g);
  void set_cache_reset(CacheReset r) { reset_ = r; }
  // The sliding attention window the engine gives its attention kernel: each position attends to
  // the last `window` positions, itself included (0: every earlier position, full attention).
  void set_attention_window(int window) { window_ = window; }
  // Empties the KV cache (DeepSpeed's reset_cache(): the position count goes back to 0; the
  // buffers stay allocated and are overwritten).
  void reset_cache() { pos_ = 0; }
  // Positions the KV cache holds now.
  int cached_positions() const { return pos_; }
  // Tensor-parallel ranks must agree token for token: compares `out` (of generate() call `call`)
  // across the TP group and throws OutputMismatchError naming the first differing request and
  // position, or the call whose length differs.
  void check_tp_agreement(const std::vector<std::vector<int32_t>>& out, int call = 0);
  // Called per generated position (numbered across calls from 0) with its wall time, the part
  // spent in collectives and each collective's time (nullopt: more than the communicator keeps).
  using StepSink = std::function<void(int64_t pos, double seconds, double comm_seconds,
                                      const std::optional<std::vector<double>>& op_seconds)>;
  void set_step_sink(StepSink sink) { sink_ = std::move(sink); }
  const model::ParamLayout& layout() const { return layout_; }

 private:
  // One position for the whole batch: tokens [B] at cache position t; with `choose`, returns the
  // next tokens (all ranks) drawn for sequence position `draw`.
  std::vector<int32_t> step(const std::vector<int32_t>& tokens, int t, bool choose,
                            const GenerateConfig& g, int64_t draw);
  // PyTorch's IndexError when cache position t is past the context.
  void check_position(int t) const;
  // Before a forward call of `n` tokens: the kPrompt policy's reset.
  void begin_forward(int n);
  // The policy's reset_cache() call, behind the fault site infer.reset_cache.
  void reset_call();
  // The KV cache for a batch of B requests (allocated on first use and when B changes).
  void ensure_cache(int B);
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
  CacheReset reset_ = CacheReset::kGenerate;
  int window_ = 0;
  int pos_ = 0;            // positions the cache holds
  int64_t calls_ = 0;      // generate() calls so far (keys the sampling draws)
  int64_t generated_ = 0;  // positions generated over all calls (the step numbers)
};

// The uniform in [0, 1) that sampling draws for (seed, call, request, position): a pure function
// of its key, so every rank that shares the seed draws the same.
double sampling_uniform(uint64_t seed, int64_t call, int request, int64_t position);

// Next token from logits [V]: argmax, or sampling with uniform `u` as HF's warpers do:
// temperature, then top-k, then top-p (the smallest set of most likely tokens whose probability
// reaches top_p, at least one), ties to the lower token id.
int32_t sample_token(const float* logits, int V, const GenerateConfig& g, double u);

}  // namespace fl::infer
