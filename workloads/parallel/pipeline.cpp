#include "workloads/parallel/pipeline.hpp"

#include <algorithm>
#include <memory>

#include "workloads/comm/communicator.hpp"

namespace fl::parallel {

using comm::device_buffer;

namespace {

// One stage's run of the micro-batches: what the schedules are made of (a forward with its
// activation exchange, a backward with its gradient exchange) over the stage's buffers.
class StageRun {
 public:
  StageRun(model::GptStage& stage, model::ParamAccess& params, Topology& topo,
           const std::vector<PipelineMicroBatch>& mbs, int T, float dloss, MemoryAccountant& acct,
           const std::function<void()>& before_backward)
      : stage_(stage),
        params_(params),
        pp_(*topo.pp),
        mbs_(mbs),
        T_(T),
        C_(stage.config().d_model),
        dloss_(dloss),
        acct_(acct),
        first_(topo.first_stage()),
        last_(topo.last_stage()),
        prev_(topo.pp_rank - 1),
        next_(topo.pp_rank + 1),
        acts_(mbs.size()),
        xin_(mbs.size()),
        before_backward_(before_backward) {}

  // GPipe: every forward, then (when training) every backward.
  void gpipe(bool backward) {
    const int M = static_cast<int>(mbs_.size());
    for (int k = 0; k < M; ++k) forward_send(k);
    if (backward) {
      for (int k = 0; k < M; ++k) recv_backward_send(k);
    }
  }

  // 1F1B: warm-up forwards, then one forward / one backward, then cool-down backwards.
  void one_f_one_b(int warmup) {
    const int M = static_cast<int>(mbs_.size());
    const int steady = M - warmup;
    for (int k = 0; k < warmup; ++k) forward_send(k);
    if (steady > 0) recv_forward(warmup);
    for (int i = 0; i < steady; ++i) steady_pair(warmup + i, i, i == steady - 1);
    for (int k = steady; k < M; ++k) recv_backward_send(k);
  }

  double loss_sum() const { return last_ ? loss_sum_ : 0.0; }

 private:
  size_t act_count(int k) const {
    return static_cast<size_t>(mbs_[static_cast<size_t>(k)].B) * T_ * C_;
  }
  Tensor act_buf(int k, const char* what) const {
    return Tensor::zeros({static_cast<int64_t>(act_count(k))}, DType::kF32, what, acct_);
  }
  comm::Buffer buf(Tensor& t, int k) const {
    return device_buffer(t.f32(), act_count(k), DType::kF32);
  }
  Tensor& xin(int k) { return xin_[static_cast<size_t>(k)]; }

  void recv_forward(int k) {
    if (first_) return;
    xin(k) = act_buf(k, "act.pipeline.recv");
    pp_.recv(buf(xin(k), k), prev_);
  }
  void fwd(int k) {
    const auto& mb = mbs_[static_cast<size_t>(k)];
    auto& a = acts_[static_cast<size_t>(k)];
    a = stage_.forward(params_, first_ ? mb.tokens : nullptr, first_ ? nullptr : xin(k).f32(),
                       mb.targets, mb.B, T_);
    if (last_) loss_sum_ += a->loss;
  }
  comm::Buffer out_buf(int k) {
    return device_buffer(const_cast<float*>(acts_[static_cast<size_t>(k)]->output()), act_count(k),
                         DType::kF32);
  }
  void forward_send(int k) {
    recv_forward(k);
    fwd(k);
    if (!last_) pp_.send(out_buf(k), next_);
  }
  // Backward of micro-batch k given dy (null on the last stage); returns dx (empty on the first).
  Tensor bwd(int k, const float* dy) {
    if (!last_ && before_backward_) before_backward_();
    Tensor dx;
    if (!first_) dx = act_buf(k, "grad.act.pipeline.send");
    stage_.backward(*acts_[static_cast<size_t>(k)], params_, dloss_, dy,
                    first_ ? nullptr : dx.f32());
    acts_[static_cast<size_t>(k)].reset();
    xin(k).release();
    return dx;
  }
  // Receive dy from the next stage, run the backward, send dx to the previous stage.
  void recv_backward_send(int k) {
    Tensor dy;
    if (!last_) {
      dy = act_buf(k, "grad.act.pipeline.recv");
      pp_.recv(buf(dy, k), next_);
    }
    Tensor dx = bwd(k, last_ ? nullptr : dy.f32());
    if (!first_) pp_.send(buf(dx, k), prev_);
  }
  // The steady phase's pair: forward of f, backward of b; each exchange pairs a send with the
  // receive the neighbour's schedule posts at the same time (the last pair only sends dx).
  void steady_pair(int f, int b, bool last_pair) {
    fwd(f);
    Tensor dy;
    if (!last_) {
      dy = act_buf(b, "grad.act.pipeline.recv");
      pp_.send_recv(out_buf(f), next_, buf(dy, b), next_);
    }
    Tensor dx = bwd(b, last_ ? nullptr : dy.f32());
    if (first_) return;
    if (last_pair) {
      pp_.send(buf(dx, b), prev_);
    } else {
      xin(f + 1) = act_buf(f + 1, "act.pipeline.recv");
      pp_.send_recv(buf(dx, b), prev_, buf(xin(f + 1), f + 1), prev_);
    }
  }

  model::GptStage& stage_;
  model::ParamAccess& params_;
  comm::Communicator& pp_;  // activations travel forward to pp_rank+1, gradients back to -1
  const std::vector<PipelineMicroBatch>& mbs_;
  const int T_, C_;
  const float dloss_;
  MemoryAccountant& acct_;
  const bool first_, last_;
  const int prev_, next_;
  std::vector<std::unique_ptr<model::StageActs>> acts_;
  std::vector<Tensor> xin_;  // activations received from the previous stage
  double loss_sum_ = 0;
  std::function<void()> before_backward_;
};

}  // namespace

double run_pipeline(model::GptStage& stage, model::ParamAccess& params, Topology& topo,
                    const std::vector<PipelineMicroBatch>& mbs, int T, float dloss, bool backward,
                    const std::string& schedule, MemoryAccountant& acct,
                    const std::function<void()>& before_backward) {
  StageRun run(stage, params, topo, mbs, T, dloss, acct, before_backward);
  if (!backward || schedule == "gpipe") {
    run.gpipe(backward);
  } else {
    const int M = static_cast<int>(mbs.size());
    run.one_f_one_b(std::min(topo.layout.pp - topo.pp_rank - 1, M));
  }
  return run.loss_sum();
}

}  // namespace fl::parallel
