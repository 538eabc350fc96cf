// The parameters a rank holds: its tensor-parallel shard of the layers of its pipeline stage,
// laid out in one flat fp32 buffer (so data-parallel buckets and ZeRO partitions are plain
// ranges). Every element is initialised from a counter-based generator keyed by (seed, parameter
// name, index in the FULL tensor), so any layout starts from exactly the single-rank weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/model/config.hpp"

namespace fl::model {

// How a parameter is split across tensor-parallel ranks (Megatron-style).
enum class Split : uint8_t {
  kReplicated,  // every TP rank holds all of it
  kRows,        // column-parallel linear: output rows split (weight [OC, C] -> [OC/tp, C])
  kCols,        // row-parallel linear: input columns split (weight [OC, C] -> [OC, C/tp])
  kQkvRows,     // fused q/k/v weight [3C, C]: each of q, k, v split by heads
};

enum class Init : uint8_t { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;  // e.g. "h1.attn.qkv.weight"
  int64_t rows = 1;  // full shape [rows, cols]
  int64_t cols = 1;
  Split split = Split::kReplicated;
  Init init = Init::kNormal;
  float stddev = 0.02f;
  int64_t local_rows = 1;  // this rank's shard
  int64_t local_cols = 1;
  size_t offset = 0;  // into the flat buffer
  // The name whose values initialise it (empty: its own): the last stage's copy of a tied wte
  // starts from wte's values, as Megatron's first all-reduce over the embedding group makes it.
  std::string init_name;
  // A copy of another stage's parameter (the tied head's wte on the last stage, Megatron's
  // param.shared): its gradient is summed with the original's, and the norm counts it once.
  bool shared = false;
  size_t numel() const { return static_cast<size_t>(local_rows * local_cols); }
};

// Views of one transformer block's parameters (pointers into a flat buffer).
struct BlockParams {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  // An MoE block (workloads/model/moe.hpp): the router's weight [experts, C]; the MLP's four
  // pointers are null (the experts live in the expert layout).
  float* gate_w = nullptr;
};

// A range of the flat buffer used together: the embedding (wte, wpe), one transformer block, or
// the head (final layer norm and LM head). ZeRO-3 gathers a group before its forward and backward;
// gradient buckets are filled group by group as the backward produces them.
struct ParamGroup {
  size_t lo = 0, hi = 0;  // [lo, hi) of the flat buffer
  int layer = -1;         // the block's global layer index; -1 embedding, -2 head
  size_t numel() const { return hi - lo; }
};

class ParamLayout {
 public:
  // The parameters of pipeline stage `stage` (of `pp`), TP shard `tp_rank` of `tp`.
  ParamLayout(const GptConfig& cfg, int tp, int tp_rank, int pp, int stage);
  // The expert parameters of EP rank `ep_rank` of `ep` (workloads/model/moe.hpp): for every MoE
  // block l and every local expert e (global index), h<l>.moe.experts.<e>.{fc,proj}.{weight,bias},
  // one group per expert, initialised by name as a dense MLP of that name would be.
  static ParamLayout experts(const GptConfig& cfg, int ep, int ep_rank);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  size_t total() const { return total_; }
  const ParamSpec& spec(const std::string& name) const;
  int first_layer() const { return first_layer_; }
  int num_layers() const { return num_layers_; }
  bool has_embedding() const { return !experts_only_ && stage_ == 0; }
  bool has_head() const { return stage_ == pp_ - 1; }
  // Rows of wte and lm_head (the padded vocabulary) and this rank's first row of them.
  int64_t vocab_rows() const { return vocab_rows_; }
  int64_t vocab_begin() const { return vocab_begin_; }
  int64_t local_vocab() const { return local_vocab_; }
  // The parameter the LM head multiplies by: "lm_head.weight", or under tied embeddings "wte"
  // (on a stage that holds it) or the last stage's copy of it, "lm_head.weight" (shared).
  const std::string& head_weight() const { return head_weight_; }
  // Whether the head's weight lives in the embedding group (tied, one stage).
  bool head_reads_embedding() const { return head_weight_ == "wte"; }

  // Fills `flat` (size total()) with the initial values of this shard.
  void initialize(float* flat, uint64_t seed) const;
  // Initial values of flat elements [lo, hi) only, written to out[0 .. hi-lo): a ZeRO-3 rank
  // can build its partition without ever materialising the whole model.
  void initialize_range(float* out, size_t lo, size_t hi, uint64_t seed) const;
  // Pointer views into a flat buffer (params or grads) for layer `l` (global index).
  BlockParams block(float* flat, int l) const;
  float* find(float* flat, const std::string& name) const;
  // The same views into a buffer that holds only elements [base, ...) of the flat layout (one
  // group's values or gradients): `data` is element `base`.
  BlockParams block(float* data, int l, size_t base) const;
  float* find(float* data, const std::string& name, size_t base) const;
  // The groups in flat order (embedding first on the first stage, head last on the last).
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Maps element (r, c) of this shard to its index in the full tensor.
  int64_t full_index(const ParamSpec& s, int64_t r, int64_t c) const;

 private:
  void add(std::string name, int64_t rows, int64_t cols, Split split, Init init, float stddev);
  void add_head();
  ParamLayout(const GptConfig& cfg) : cfg_(cfg), tp_(1), tp_rank_(0), pp_(1), stage_(0) {}
  GptConfig cfg_;
  bool experts_only_ = false;
  int64_t vocab_rows_ = 0, vocab_begin_ = 0, local_vocab_ = 0;
  std::string head_weight_ = "lm_head.weight";
  int tp_, tp_rank_, pp_, stage_;
  int first_layer_ = 0, num_layers_ = 0;
  std::vector<ParamSpec> specs_;
  std::vector<ParamGroup> groups_;
  size_t total_ = 0;
};

// Standard-normal value for (seed, name, index): SplitMix64 counters into Box-Muller.
float counter_normal(uint64_t seed, const std::string& name, int64_t index);

}  // namespace fl::model
