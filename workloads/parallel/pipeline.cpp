#include "workloads/parallel/pipeline.hpp"

#include <algorithm>
#include <memory>

#include "workloads/comm/communicator.hpp"

namespace fl::parallel {

using comm::device_buffer;

double run_pipeline(model::GptStage& stage, model::ParamAccess& params, Topology& topo,
                    const std::vector<PipelineMicroBatch>& mbs, int T, float dloss, bool backward,
                    const std::string& schedule, MemoryAccountant& acct) {
  const int M = static_cast<int>(mbs.size()), C = stage.config().d_model;
  double loss_sum = 0;
  // Pipeline: activations travel forward to pp_rank+1, gradients backward to pp_rank-1.
  comm::Communicator& pp = *topo.pp;
  const bool first = topo.first_stage(), last = topo.last_stage();
  const int prev = topo.pp_rank - 1, next = topo.pp_rank + 1;
  std::vector<std::unique_ptr<model::StageActs>> acts(static_cast<size_t>(M));
  std::vector<Tensor> xin(static_cast<size_t>(M));
  auto act_count = [&](int k) {
    return static_cast<size_t>(mbs[static_cast<size_t>(k)].B) * T * C;
  };
  auto act_buf = [&](int k, const char* what) {
    return Tensor::zeros({static_cast<int64_t>(act_count(k))}, DType::kF32, what, acct);
  };
  auto recv_forward = [&](int k) {
    if (first) return;
    xin[static_cast<size_t>(k)] = act_buf(k, "act.pipeline.recv");
    pp.recv(device_buffer(xin[static_cast<size_t>(k)].f32(), act_count(k), DType::kF32), prev);
  };
  auto fwd = [&](int k) {
    const auto& mb = mbs[static_cast<size_t>(k)];
    acts[static_cast<size_t>(k)] =
        stage.forward(params, first ? mb.tokens : nullptr,
                      first ? nullptr : xin[static_cast<size_t>(k)].f32(), mb.targets, mb.B, T);
    if (last) loss_sum += acts[static_cast<size_t>(k)]->loss;
  };
  auto out_buf = [&](int k) {
    return device_buffer(const_cast<float*>(acts[static_cast<size_t>(k)]->output()), act_count(k),
                         DType::kF32);
  };
  // Backward of micro-batch k given dy (null on the last stage); returns dx (empty on the first).
  auto bwd = [&](int k, const float* dy) {
    Tensor dx;
    if (!first) dx = act_buf(k, "grad.act.pipeline.send");
    stage.backward(*acts[static_cast<size_t>(k)], params, dloss, dy, first ? nullptr : dx.f32());
    acts[static_cast<size_t>(k)].reset();
    xin[static_cast<size_t>(k)].release();
    return dx;
  };

  // Receive dy from the next stage, run the backward, send dx to the previous stage.
  auto recv_backward_send = [&](int k) {
    Tensor dy;
    if (!last) {
      dy = act_buf(k, "grad.act.pipeline.recv");
      pp.recv(device_buffer(dy.f32(), act_count(k), DType::kF32), next);
    }
    Tensor dx = bwd(k, last ? nullptr : dy.f32());
    if (!first) pp.send(device_buffer(dx.f32(), act_count(k), DType::kF32), prev);
  };

  if (!backward || schedule == "gpipe") {
    for (int k = 0; k < M; ++k) {
      recv_forward(k);
      fwd(k);
      if (!last) pp.send(out_buf(k), next);
    }
    if (backward) {
      for (int k = 0; k < M; ++k) recv_backward_send(k);
    }
  } else {  // 1F1B: warm-up forwards, then one forward / one backward, then cool-down backwards
    const int warmup = std::min(topo.layout.pp - topo.pp_rank - 1, M);
    const int steady = M - warmup;
    for (int k = 0; k < warmup; ++k) {
      recv_forward(k);
      fwd(k);
      if (!last) pp.send(out_buf(k), next);
    }
    if (steady > 0) recv_forward(warmup);
    for (int i = 0; i < steady; ++i) {
      const int f = warmup + i;
      fwd(f);
      Tensor dy;
      if (!last) {
        dy = act_buf(i, "grad.act.pipeline.recv");
        pp.send_recv(out_buf(f), next, device_buffer(dy.f32(), act_count(i), DType::kF32), next);
      }
      Tensor dx = bwd(i, last ? nullptr : dy.f32());
      if (!first) {
        auto dxb = device_buffer(dx.f32(), act_count(i), DType::kF32);
        if (i == steady - 1) {
          pp.send(dxb, prev);
        } else {
          xin[static_cast<size_t>(f + 1)] = act_buf(f + 1, "act.pipeline.recv");
          pp.send_recv(
              dxb, prev,
              device_buffer(xin[static_cast<size_t>(f + 1)].f32(), act_count(f + 1), DType::kF32),
              prev);
        }
      }
    }
    for (int k = steady; k < M; ++k) recv_backward_send(k);
  }
  return last ? loss_sum : 0.0;
}

}  // namespace fl::parallel
