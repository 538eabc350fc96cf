// workload.pair_loss: each two micro-batches are a pair whose losses are summed before one
// backward, as a Siamese model applies one network to two inputs or DPO scores a chosen and a
// rejected sequence. torch differentiates the sum in one autograd pass: a parameter used by both
// halves gets one gradient hook call, after both halves added to its gradient. A reentrant
// activation checkpoint differentiates each checkpointed segment in an autograd pass of its own,
// so a block's parameters get one hook call per use: under ZeRO-2/3, whose hook reduces the
// gradient and marks it reduced, the second call is DeepSpeed's "Gradient computed twice for this
// partition" (deepspeedai/DeepSpeed#988). The gradients are those of the two micro-batches
// trained apart (the sum is linear), so without checkpointing, or below stage 2, the run trains
// as with grad_accum alone.
#include <chrono>

#include "base/error.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

namespace {

// The first half's backward: its gradient hooks are held back (the second half's backward calls
// them once both halves have added to the gradients), except for a group whose backward is a
// checkpointed segment of its own, which fires at each use.
class FirstOfPair final : public model::ParamAccess {
 public:
  FirstOfPair(model::ParamAccess& inner, const model::GptStage& stage)
      : in_(inner), stage_(stage) {}
  const float* acquire(int g, bool backward) override { return in_.acquire(g, backward); }
  void release(int g, bool backward) override { in_.release(g, backward); }
  float* grads(int g) override { return in_.grads(g); }
  void grads_done(int g) override {
    if (stage_.recomputes(g)) in_.grads_done(g);
  }
  DType stored() const override { return in_.stored(); }
  const void* acquire_stored(int g, bool backward) override {
    return in_.acquire_stored(g, backward);
  }
  void* grads_stored(int g) override { return in_.grads_stored(g); }

 private:
  model::ParamAccess& in_;
  const model::GptStage& stage_;
};

}  // namespace

void check_pair_loss(const TrainConfig& c, const model::Layout& l) {
  if (!c.pair_loss) return;
  if (c.grad_accum % 2 != 0) {
    raise<ConfigError>(
        "workload.pair_loss (--pair-loss) sums the losses of two micro-batches before one "
        "backward: workload.grad_accum must be even (this run: {})",
        c.grad_accum);
  }
  if (l.pp != 1) {
    raise<ConfigError>(
        "workload.pair_loss (--pair-loss) runs both forwards before the backward on one stage "
        "(allowed: pp 1; this run: pp {})",
        l.pp);
  }
}

double Trainer::pair_forward_backward(const std::vector<MicroBatch>& mbs, bool backward,
                                      float dloss) {
  const int T = cfg_.model.seq_len;
  double loss_sum = 0;
  for (size_t i = 0; i + 1 < mbs.size(); i += 2) {
    const auto f0 = std::chrono::steady_clock::now();
    std::unique_ptr<model::StageActs> half[2];
    for (int k = 0; k < 2; ++k) {
      // (The model.forward fault site, which skips or repeats one forward, is not on this path.)
      const auto& mb = mbs[i + static_cast<size_t>(k)];
      half[k] = stage_.forward(*zero_, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, T);
      loss_sum += half[k]->loss;
    }
    phase("forward", f0);
    if (!backward) continue;
    const auto b0 = std::chrono::steady_clock::now();
    // (loss_a + loss_b).backward(): one pass over both halves.
    zero_->begin_backward();
    FirstOfPair first(*zero_, stage_);
    stage_.backward(*half[0], first, dloss, nullptr, nullptr);
    stage_.backward(*half[1], *zero_, dloss, nullptr, nullptr);
    zero_->end_backward();
    phase("backward", b0);
    if (cfg_.grad_sync == "micro_batch" && i + 2 < mbs.size()) {
      zero_->all_reduce_gradients();
      if (experts_) experts_->all_reduce_gradients();
    }
  }
  return loss_sum;
}

}  // namespace fl::train
