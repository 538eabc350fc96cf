// The Mixture-of-Experts block that replaces a block's MLP (docs/workloads.md#mixture-of-experts):
// a router (gate linear -> softmax -> top-k) and N expert MLPs shaped like the dense one.
//
// Two ways to route, both from the frameworks:
//   GShard / DeepSpeed (deepspeed/moe/sharded_moe.py top1gating, top2gating): each expert takes
//     at most `capacity` tokens, the rest are dropped (their MLP output is 0, the residual carries
//     them); tokens go to the rank that owns their expert in a [experts, capacity, C] buffer
//     exchanged with an all-to-all over the expert-parallel group, and every local expert runs on
//     its whole buffer (padding rows included), so every rank gathers the same parameters.
//   Mixtral (transformers' MixtralSparseMoeBlock, `dropless`): no capacity, no exchange; the
//     block loops over the experts and skips one that received no token. Under ZeRO-3 a rank
//     gathers only the experts its tokens touched, so ranks whose tokens route differently issue
//     different gathers; `z3_leaf` gathers every expert of the block at once, as
//     deepspeed.utils.set_z3_leaf_modules makes the block one unit.
//
// Router arithmetic runs on the host in fp32 (as DeepSpeed's gating: "everything is in fp32 in
// this function"); the experts' GEMMs run on the rank's device. Token order decides who is
// dropped (DeepSpeed with use_rts=False: first come, first served).
#pragma once

#include <memory>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/model/gpt.hpp"
#include "workloads/model/params.hpp"

namespace fl::model {

// The router's decisions for S tokens over E experts (each token has k slots).
struct Routing {
  int S = 0, E = 0, k = 1;
  int capacity = 0;              // 0: unlimited (dropless)
  std::vector<float> probs;      // [S, E] softmax of the gate's logits
  std::vector<int> expert;       // [S, k] chosen expert of each slot
  std::vector<int> location;     // [S, k] row in the expert's buffer; -1: dropped
  std::vector<float> weight;     // [S, k] combine weight (0 when dropped)
  std::vector<int> counts;       // [E] slots routed to each expert before dropping (exp_counts)
  std::vector<float> top1_frac;  // [E] ce: fraction of tokens whose choice is e (aux loss)
  bool normalized = false;       // weights divided by the kept slots' probability sum
  float aux = 0;                 // the load-balancing loss: E x sum_e me_e x ce_e
  int dropped = 0;               // slots dropped by the capacity
};

// DeepSpeed's _capacity: ceil(S / E x factor), at least min_capacity (top-2: factor x 2).
int gshard_capacity(int S, int E, int k, float factor, int min_capacity);

// Softmax, top-k choices, slot locations and the aux loss (nothing dropped yet). `gshard`: the
// second choice is the best logit after the first and locations of second choices follow every
// first choice (top2gating); ce counts first choices. Otherwise (Mixtral) ce counts every slot.
Routing route(const float* logits, int S, int E, int k, bool gshard);
// Drops the slots whose location is at or past `capacity` (0: none) and sets the combine
// weights: top-1 GShard keeps the gate probability; top-2 and Mixtral normalise over the kept
// slots (denominator clamped at fp32 epsilon as DeepSpeed's).
void apply_capacity(Routing& r, int capacity);
// d(loss)/d(probs) [S, E] -> d(loss)/d(logits) [S, E]: the combine weights' gradients `dweight`
// [S, k] through their normalisation, plus `daux` x d(aux)/d(probs), through the softmax.
std::vector<float> router_backward(const Routing& r, const std::vector<float>& dweight, float daux);

// What one MoE block keeps for its backward.
struct MoeActs {
  Routing routing;
  int layer = 0, N = 0;
  // Per local expert: its input rows, fc output, GELU output and output rows.
  std::vector<Tensor> xin, h, a, out;
  std::vector<std::vector<int>> rows;  // dropless: the token slots (s * k + j) of each expert
  std::vector<float> combined;         // GShard: expert outputs back at the token's rank [E,cap,C]
  Tensor y;                            // [N, C] the block's MLP output
  float aux = 0;
};

class MoeLayer {
 public:
  // `experts`: ParamLayout::experts of this EP rank; `params` reads its groups (the expert ZeRO
  // engine); `ep_group`: the expert-parallel group (null or size 1: every expert is local).
  MoeLayer(const GptConfig& cfg, const ParamLayout& experts, ParamAccess& params,
           comm::Communicator* ep_group, MemoryAccountant& acct);

  // x: the block's ln2 output [N, C]; gate_w [E, C]. The output (moved into the block's fcproj)
  // is in the returned acts' y.
  std::shared_ptr<MoeActs> forward(const float* x, const float* gate_w, int l, int N, DType act);
  // dy: d(loss)/d(y) [N, C]; accumulates dx (+=) and the gate's gradient; daux:
  // d(objective)/d(aux).
  void backward(MoeActs& m, const float* x, const float* gate_w, float* dgate_w, const float* dy,
                float* dx, float daux, DType act);

  int local_experts() const { return local_; }
  int ep_size() const { return ep_; }
  int ep_rank() const { return ep_rank_; }
  // The expert group of (block l, local expert j) in the expert layout.
  int group_of(int l, int j) const;

 private:
  struct ExpertWeights {
    const float *fc_w, *fc_b, *proj_w, *proj_b;
  };
  struct ExpertGrads {
    float *fc_w, *fc_b, *proj_w, *proj_b;
  };
  ExpertWeights weights(int l, int j, const float* group) const;
  ExpertGrads grads(int l, int j, float* group) const;
  Tensor alloc(int64_t rows, int64_t cols, const std::string& what);
  // One expert MLP over `rows` rows of xin into m's h/a/out slot j.
  void expert_forward(MoeActs& m, int j, const ExpertWeights& w, int rows, DType act);
  // Its backward from dout [rows, C]: the expert's gradients (scaled by grad_scale) and dxin.
  void expert_backward(MoeActs& m, int j, const ExpertWeights& w, const ExpertGrads& g,
                       const float* dout, float* dxin, int rows, DType act);
  void gshard_forward(MoeActs& m, const float* x, DType act);
  void gshard_backward(MoeActs& m, const float* dy, std::vector<float>& dweight, float* dx,
                       DType act);
  void dropless_forward(MoeActs& m, const float* x, DType act);
  void dropless_backward(MoeActs& m, const float* dy, std::vector<float>& dweight, float* dx,
                         DType act);
  // [ep, E_local, cap, C] blocks exchanged over the EP group (a copy when ep is 1).
  std::vector<float> exchange(std::vector<float> in);
  // The capacity for this micro-batch: GShard's, or the EP group's largest load (drop_tokens
  // false: all-reduced with max, as DeepSpeed does over its ep_group).
  int capacity_for(const Routing& r);
  // ZeRO-3 leaf module: every local expert of block l acquired (or released) together.
  void acquire_all(int l, bool backward);
  void release_all(int l, bool backward);

  GptConfig cfg_;
  MoeConfig moe_;
  const ParamLayout& layout_;
  ParamAccess& params_;
  comm::Communicator* ep_group_;
  MemoryAccountant& acct_;
  int ep_ = 1, ep_rank_ = 0, local_ = 0;
};

}  // namespace fl::model
