// One pipeline stage of a GPT-style decoder, tensor-parallel Megatron-style: q/k/v and the MLP's
// first linear are column-parallel, the attention and MLP output projections are row-parallel
// and followed by an all-reduce over the TP group (with its conjugate in backward). Layer norms
// are replicated across TP ranks; wte and the LM head are replicated too, or (vocab_parallel)
// split by vocabulary rows as Megatron's VocabParallelEmbedding and column-parallel head, with the
// head's logits sharded (a vocab-parallel cross entropy) or all-gathered (parallel_output false).
// Under tied embeddings the head multiplies by wte itself (docs/workloads.md#structure).
// Activations of each micro-batch are tensors charged to the rank's memory accountant, so a
// micro-batch too large for the budget fails with the real out-of-memory error at the allocation
// that exceeds it.
#pragma once

#include <memory>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/model/params.hpp"

namespace fl::model {

struct MoeActs;  // workloads/model/moe.hpp
class MoeLayer;

// Under fp16/bf16 the activations kept for the backward are 16-bit tensors (2 bytes per element,
// as a half-precision model keeps them); layer-norm statistics, the softmax probabilities and the
// per-token losses stay fp32 (as autocast keeps them). The stage's output on a stage without the
// head stays fp32 (it is what the pipeline sends). An MoE block's own activations (MoeActs: the
// dispatched rows and the experts' outputs) are fp32 holding values rounded to the format.
struct LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, att, atty, attproj, res2;
  Tensor ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, res3;
  std::shared_ptr<MoeActs> moe;  // an MoE block's router and experts (fcproj is its output)
};

// Everything one micro-batch leaves behind for its backward pass.
struct StageActs {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;  // host copies (checks, embedding backward indices)
  Tensor tokens_dev, targets_dev;        // [B*T] int32 on the stage's device
  Tensor input;  // [B, T, C]: the embedding output (first stage) or the received activation
  std::vector<LayerActs> layers;
  // Vocab-parallel embedding: the positions whose token lies in another TP rank's rows (their
  // embedding rows are zero here; the all-reduce brings them), and tokens_dev holds local rows.
  std::vector<int32_t> foreign;
  Tensor lnf, lnf_mean, lnf_rstd, probs, losses;  // last stage only
  // probs holds this TP rank's slice of the (padded) vocabulary [N, V/tp] (vocab_parallel with
  // parallel_output), else the whole of it [N, V].
  bool sharded_probs = false;
  float loss = 0;     // mean over valid targets (last stage), plus the MoE aux losses x coefficient
  float moe_aux = 0;  // sum of the MoE blocks' load-balancing losses
  float dloss = 0;    // the backward's d(objective)/d(loss)
  int valid_targets = 0;
  const float* output() const;  // [B, T, C] for the next stage
};

// Where a stage reads each parameter group's values and writes its gradients (groups as in
// ParamLayout::groups(): embedding, one per block, head). The default is one flat buffer for each;
// the ZeRO engine (workloads/parallel/zero.hpp) gathers a ZeRO-3 group just before it is used and
// frees it after, and reduces a group's gradients as soon as its backward has written them.
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // The values of group g: element [groups()[g].lo] of the flat layout first; valid until
  // release(g, same backward flag).
  virtual const float* acquire(int g, bool backward) = 0;
  virtual void release(int g, bool backward) {
    (void)g;
    (void)backward;
  }
  // Where group g's gradients accumulate (laid out like acquire's values).
  virtual float* grads(int g) = 0;
  // Group g's backward of this micro-batch has finished writing grads(g).
  virtual void grads_done(int g) { (void)g; }
  // The format group values and gradients are held in. fp32: acquire_stored and grads_stored are
  // acquire and grads. 16-bit (a ZeRO engine under fp16/bf16): the stage decodes one op's
  // parameters at a time from acquire_stored's values into fp32 scratch, and accumulates one op's
  // gradients at a time in fp32 scratch encoded back into grads_stored's (never a whole group).
  virtual DType stored() const { return DType::kF32; }
  virtual const void* acquire_stored(int g, bool backward) { return acquire(g, backward); }
  virtual void* grads_stored(int g) { return grads(g); }
};

// Values and gradients in one flat buffer each.
class FlatParams final : public ParamAccess {
 public:
  FlatParams(const ParamLayout& layout, const float* params, float* grads)
      : layout_(layout), params_(params), grads_(grads) {}
  const float* acquire(int g, bool) override;
  float* grads(int g) override;

 private:
  const ParamLayout& layout_;
  const float* params_;
  float* grads_;
};

class GptStage {
 public:
  GptStage(const GptConfig& cfg, const ParamLayout& layout, comm::Communicator* tp_group,
           MemoryAccountant& acct);

  // Forward of this stage. First stage: `tokens` [B*T]; others: `x_in` [B*T*C]. Last stage:
  // `targets` [B*T] (negative = ignored) and the returned acts carry the loss.
  std::unique_ptr<StageActs> forward(ParamAccess& params, const int32_t* tokens, const float* x_in,
                                     const int32_t* targets, int B, int T);
  std::unique_ptr<StageActs> forward(const float* params, const int32_t* tokens, const float* x_in,
                                     const int32_t* targets, int B, int T);
  // Backward, accumulating into `grads`. Last stage: `dloss` is d(objective)/d(mean loss).
  // Other stages: `dx_out` is the gradient of this stage's output. Writes `dx_in` (if non-null)
  // with the gradient of this stage's input for the previous stage.
  void backward(StageActs& acts, ParamAccess& params, float dloss, const float* dx_out,
                float* dx_in);
  void backward(StageActs& acts, const float* params, float* grads, float dloss,
                const float* dx_out, float* dx_in);

  // Activation checkpointing: the forward keeps only each block's output; the backward recomputes
  // a block's activations from its input just before its backward and frees them after.
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  // Whether group g's backward runs in a checkpointed segment of its own (a block's, recomputed
  // and differentiated apart from the rest of the backward, as a reentrant checkpoint does).
  bool recomputes(int g) const {
    const int first = layout_.has_embedding() ? 1 : 0;
    return checkpointing_ && g >= first && g < first + layout_.num_layers();
  }
  // The experts of the MoE blocks (workloads/model/moe.hpp); required when the model has any.
  void set_moe(MoeLayer* moe) { moe_ = moe; }

  const ParamLayout& layout() const { return layout_; }
  const GptConfig& config() const { return cfg_; }
  // The format activations are stored in, as a framework's half-precision model keeps them:
  // under fp16/bf16 every op output (embeddings, GEMMs, attention, GELU, residual adds, layer-norm
  // outputs, logits) and every activation and parameter gradient of the backward is rounded to it
  // as the op writes it, so fp16 overflows to inf above 65504, and the op outputs kept for the
  // backward are 16-bit tensors (each op computes in fp32 scratch); softmax, layer-norm
  // statistics, the loss and the sums inside each op stay fp32. fp32 (the default) rounds
  // nothing.
  void set_activation_precision(DType t) { act_ = t; }
  DType activation_precision() const { return act_; }

 private:
  // One group's values (and in the backward its gradients) as the ParamAccess holds them.
  struct GroupView {
    const void* values = nullptr;
    void* grads = nullptr;
    DType format = DType::kF32;
    size_t base = 0;  // the group's first element of the flat layout
  };
  Tensor alloc(std::vector<int64_t> shape, const std::string& what);
  // An int32 tensor on the stage's device holding `n` host values.
  Tensor upload(const int32_t* host, int n, const std::string& what);
  void tp_all_reduce(float* data, size_t n);
  // Whether wte and the head are split by vocabulary rows over more than one TP rank.
  bool vocab_split() const { return layout_.local_vocab() != layout_.vocab_rows(); }
  // The embedding's forward into a.input and its backward from the residual gradient dx.
  void embed_forward(StageActs& a, ParamAccess& pa, const int32_t* tokens, Tensor& out);
  void embed_backward(StageActs& a, ParamAccess& pa, Tensor& dx);
  // The head: final layer norm, the LM head's logits (this rank's slice, or gathered), the loss.
  void head_forward(StageActs& a, ParamAccess& pa, const Tensor& x, const int32_t* targets);
  // The group holding the head's weight (the head group `head`, or the embedding group under tied
  // embeddings: acquired here, released by release_head_weight) and the weight's name there.
  GroupView head_weight_group(ParamAccess& pa, const GroupView& head, bool backward);
  const std::string& head_weight_name() const;
  void release_head_weight(ParamAccess& pa, bool backward);
  // Megatron's _VocabParallelCrossEntropy over the sharded logits in a.probs: the row maximum,
  // the sum of exponentials and the target's logit all-reduced over TP; a.probs becomes this
  // rank's slice of the softmax and a.losses the per-token loss. Host arithmetic.
  void vocab_parallel_cross_entropy(StageActs& a);
  // d(loss)/d(logits) of this rank's slice: (softmax - onehot(target)) x per_token.
  void vocab_parallel_cross_entropy_backward(StageActs& a, float per_token, Tensor& dlogits);
  // The TP ranks' logit slices [N, V/tp] put side by side into [N, V] (all-gather over TP), and
  // this rank's columns of a full [N, V] gradient back out.
  Tensor gather_logits(const Tensor& local, int N);
  void take_local_columns(const Tensor& full, Tensor& local, int N);
  GroupView group(ParamAccess& pa, int g, bool backward);
  // One op's parameter in fp32: a pointer into an fp32 group, or scratch decoded from a 16-bit
  // group (freed with the OpParam).
  struct OpParam {
    const float* p = nullptr;
    Tensor scratch;
  };
  OpParam param(const GroupView& v, const std::string& name);
  // Where one op accumulates a parameter's gradients: into an fp32 group, or fp32 scratch decoded
  // from a 16-bit group's gradients and encoded back (rounded to the format) when it is destroyed.
  class OpGrad {
   public:
    explicit OpGrad(float* direct) : p_(direct) {}
    OpGrad(Tensor scratch, void* dst, DType format);
    OpGrad(OpGrad&& o) noexcept;
    OpGrad(const OpGrad&) = delete;
    OpGrad& operator=(const OpGrad&) = delete;
    OpGrad& operator=(OpGrad&&) = delete;
    ~OpGrad();
    float* get() const { return p_; }

   private:
    float* p_ = nullptr;
    Tensor scratch_;
    void* dst_ = nullptr;
    DType format_ = DType::kF32;
  };
  OpGrad grad(const GroupView& v, const std::string& name);
  // ops::linear_backward of the op whose weight (and bias, unless empty) are named: the weight's
  // and bias' gradients accumulate through grad(), the input gradient into dinp.
  void linear_backward(const GroupView& w, const std::string& weight, const std::string& bias,
                       float* dinp, const float* dout, const float* inp, int N, int C, int OC);
  // An op's output in fp32: the kept activation itself under fp32 (named `what`), fp32 scratch
  // under fp16/bf16; keep() turns it into what the backward keeps (rounded to the format: the
  // tensor itself, or a 16-bit copy named `what` unless `as_f32`); f32() reads a kept one back.
  Tensor out(std::vector<int64_t> shape, const std::string& what);
  Tensor keep(Tensor t, const std::string& what, bool as_f32 = false);
  Tensor f32(const Tensor& kept);
  // One block's forward from input x (a kept activation), filling L.
  void block_forward(LayerActs& L, const Tensor& x, const GroupView& w, int l, int B, int T);
  // Its second half: from L.res2 through the MLP to L.res3.
  void block_mlp_forward(LayerActs& L, const GroupView& w, int l, int B, int T);
  // The block's MLP from L.ln2 into L.fcproj (kept): dense, or the MoE block (MoE layers of
  // cfg_.moe, whose group holds the router's weight instead of the MLP's).
  void mlp_forward(LayerActs& L, const GroupView& w, int l, int N);
  // Its backward from dx (the gradient of fcproj) to the gradient of ln2's output; the dense
  // MLP's gradient of fch is left in dfch (the caller's: it lives to the end of the MLP's
  // backward).
  Tensor mlp_backward(StageActs& a, LayerActs& L, const GroupView& w, int l, Tensor& dx,
                      Tensor& dfch);
  // The backward of the head (final layer norm, LM head, loss) into the residual gradient `dx`.
  void head_backward(StageActs& a, ParamAccess& pa, float dloss, Tensor& dx);
  // The backward of the stage's li-th block: takes `dx` from the block's output to its input
  // and accumulates the block's parameter gradients (recomputing its activations if dropped).
  void block_backward(StageActs& a, ParamAccess& pa, int li, Tensor& dx);
  // Its halves: the MLP (dx from res3 to res2), the attention (dx from res2 to the input x).
  void block_mlp_backward(StageActs& a, LayerActs& L, const GroupView& w, int l, Tensor& dx);
  void block_attention_backward(StageActs& a, LayerActs& L, const Tensor& x, const GroupView& w,
                                int l, Tensor& dx);
  int block_group(int li) const { return (layout_.has_embedding() ? 1 : 0) + li; }
  int head_group() const { return static_cast<int>(layout_.groups().size()) - 1; }
  // Rounds an op's output to the activation precision (nothing under fp32).
  void rnd(Tensor& t);
  // Rounds the gradients of the parameters whose names start with `prefix` (e.g. "h3."); `grads`
  // holds the parameter group that starts at element `base` of the stage.
  void round_grads(float* grads, const std::string& prefix, size_t base);

  GptConfig cfg_;
  const ParamLayout& layout_;
  comm::Communicator* tp_;
  int tp_size_;
  MemoryAccountant& acct_;
  bool checkpointing_ = false;
  DType act_ = DType::kF32;
  MoeLayer* moe_ = nullptr;
};

}  // namespace fl::model
