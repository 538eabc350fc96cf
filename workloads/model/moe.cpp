// The MoE block's experts: the expert layout of an EP rank, token dispatch (GShard buffers over an
// all-to-all, or Mixtral's per-expert loop), the expert MLPs and their backward.
#include "workloads/model/moe.hpp"

#include <cmath>
#include <string>

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace fl::model {

ParamLayout ParamLayout::experts(const GptConfig& cfg, int ep, int ep_rank) {
  ParamLayout out(cfg);
  out.experts_only_ = true;
  const int64_t C = cfg.d_model;
  const int local = cfg.moe.experts / ep;
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    if (!cfg.moe.is_moe_layer(l)) continue;
    for (int j = 0; j < local; ++j) {
      const size_t lo = out.total_;
      const std::string p =
          "h" + std::to_string(l) + ".moe.experts." + std::to_string(ep_rank * local + j) + ".";
      out.add(p + "fc.weight", 4 * C, C, Split::kReplicated, Init::kNormal, 0.02f);
      out.add(p + "fc.bias", 4 * C, 1, Split::kReplicated, Init::kZeros, 0);
      out.add(p + "proj.weight", C, 4 * C, Split::kReplicated, Init::kNormal, proj_std);
      out.add(p + "proj.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
      out.groups_.push_back({lo, out.total_, l});
    }
  }
  return out;
}

MoeLayer::MoeLayer(const GptConfig& cfg, const ParamLayout& experts, ParamAccess& params,
                   comm::Communicator* ep_group, MemoryAccountant& acct)
    : cfg_(cfg),
      moe_(cfg.moe),
      layout_(experts),
      params_(params),
      ep_group_(ep_group),
      acct_(acct),
      ep_(ep_group ? ep_group->size() : 1),
      ep_rank_(ep_group ? ep_group->rank() : 0),
      local_(cfg.moe.experts / (ep_group ? ep_group->size() : 1)) {}

int MoeLayer::group_of(int l, int j) const {
  const int block = (l + 1) / moe_.interval - 1;  // MoE blocks before this one
  return block * local_ + j;
}

MoeLayer::ExpertWeights MoeLayer::weights(int l, int j, const float* group) const {
  const size_t base = layout_.groups()[static_cast<size_t>(group_of(l, j))].lo;
  const std::string p =
      "h" + std::to_string(l) + ".moe.experts." + std::to_string(ep_rank_ * local_ + j) + ".";
  auto* d = const_cast<float*>(group);
  return {layout_.find(d, p + "fc.weight", base), layout_.find(d, p + "fc.bias", base),
          layout_.find(d, p + "proj.weight", base), layout_.find(d, p + "proj.bias", base)};
}

MoeLayer::ExpertGrads MoeLayer::grads(int l, int j, float* group) const {
  const ExpertWeights w = weights(l, j, group);
  return {const_cast<float*>(w.fc_w), const_cast<float*>(w.fc_b), const_cast<float*>(w.proj_w),
          const_cast<float*>(w.proj_b)};
}

Tensor MoeLayer::alloc(int64_t rows, int64_t cols, const std::string& what) {
  return Tensor::zeros({rows, cols}, DType::kF32, what, acct_);
}

int MoeLayer::capacity_for(const Routing& r) {
  if (moe_.drop_tokens) {
    return gshard_capacity(r.S, r.E, r.k, moe_.capacity_factor, moe_.min_capacity);
  }
  // drop_tokens false: the largest expert load, the same on every rank of the EP group (unless
  // the gate lacks its group: each rank's own, DeepSpeed#6809).
  int32_t c = 0;
  for (int n : r.counts) c = std::max(c, static_cast<int32_t>(n));
  if (ep_ > 1 && moe_.gate_ep_group)
    ep_group_->all_reduce(comm::host_buffer(&c, 1, DType::kI32), comm::ReduceOp::kMax);
  if (r.k == 1) c = std::min(c, static_cast<int32_t>(r.S));
  return std::max<int32_t>(c, 1);
}

void MoeLayer::acquire_all(int l, bool backward) {
  for (int j = 0; j < local_; ++j) params_.acquire(group_of(l, j), backward);
}

void MoeLayer::release_all(int l, bool backward) {
  for (int j = 0; j < local_; ++j) params_.release(group_of(l, j), backward);
}

std::vector<float> MoeLayer::exchange(std::vector<float> in) {
  if (ep_ <= 1) return in;
  std::vector<float> out(in.size());
  ep_group_->all_to_all(comm::host_buffer(in.data(), in.size(), DType::kF32),
                        comm::host_buffer(out.data(), out.size(), DType::kF32));
  return out;
}

std::shared_ptr<MoeActs> MoeLayer::forward(const float* x, const float* gate_w, int l, int N,
                                           DType act) {
  const int C = cfg_.d_model, E = moe_.experts;
  auto m = std::make_shared<MoeActs>();
  m->layer = l;
  m->N = N;
  Tensor logits = alloc(N, E, "act.h" + std::to_string(l) + ".moe.logits");
  ops::linear_forward(logits.f32(), x, gate_w, nullptr, N, C, E);
  std::vector<float> lh(static_cast<size_t>(N) * E);
  ops::to_host(lh.data(), logits.f32(), lh.size() * sizeof(float));
  if (!moe_.dropless && moe_.top_k == 1 && N < moe_.min_capacity) {
    raise(
        "No. of tokens (batch-size) should be greater than min_capacity. Either set min_capacity "
        "to 0 or increase your batch size. ({} tokens, workload.moe.min_capacity {})",
        N, moe_.min_capacity);
  }
  m->routing = route(lh.data(), N, E, moe_.top_k, !moe_.dropless);
  apply_capacity(m->routing, moe_.dropless ? 0 : capacity_for(m->routing));
  m->aux = m->routing.aux;
  m->y = alloc(N, C, "act.h" + std::to_string(l) + ".moe.out");
  m->xin.resize(static_cast<size_t>(local_));
  m->h.resize(static_cast<size_t>(local_));
  m->a.resize(static_cast<size_t>(local_));
  m->out.resize(static_cast<size_t>(local_));
  if (moe_.dropless) {
    dropless_forward(*m, x, act);
  } else {
    gshard_forward(*m, x, act);
  }
  if (act != DType::kF32) ops::round_to_precision(m->y.f32(), m->y.numel(), act);
  return m;
}

void MoeLayer::expert_forward(MoeActs& m, int j, const ExpertWeights& w, int rows, DType act) {
  const int C = cfg_.d_model;
  const auto u = static_cast<size_t>(j);
  const std::string n = "act.h" + std::to_string(m.layer) + ".moe.experts." +
                        std::to_string(ep_rank_ * local_ + j) + ".";
  m.h[u] = alloc(rows, 4 * C, n + "fc");
  ops::linear_forward(m.h[u].f32(), m.xin[u].f32(), w.fc_w, w.fc_b, rows, C, 4 * C);
  m.a[u] = alloc(rows, 4 * C, n + "fc.gelu");
  ops::gelu_forward(m.a[u].f32(), m.h[u].f32(), static_cast<size_t>(rows) * 4 * C);
  m.out[u] = alloc(rows, C, n + "proj");
  ops::linear_forward(m.out[u].f32(), m.a[u].f32(), w.proj_w, w.proj_b, rows, 4 * C, C);
  if (act != DType::kF32) {
    for (Tensor* t : {&m.h[u], &m.a[u], &m.out[u]})
      ops::round_to_precision(t->f32(), t->numel(), act);
  }
}

void MoeLayer::expert_backward(MoeActs& m, int j, const ExpertWeights& w, const ExpertGrads& g,
                               const float* dout, float* dxin, int rows, DType act) {
  const int C = cfg_.d_model;
  const auto u = static_cast<size_t>(j);
  // The expert-data-parallel all-reduce averages over dp / ep ranks, but every rank of the EP
  // group sent tokens here: 1/ep makes it an average over all dp ranks (DeepSpeed divides the
  // expert gradients by the data-parallel world size for the same reason). Exact for ep 2^n.
  const float inv = 1.0f / static_cast<float>(ep_);
  Tensor dsc = alloc(rows, C, "grad.act.moe.expert_out");
  ops::copy(dsc.f32(), dout, static_cast<size_t>(rows) * C);
  if (ep_ > 1) ops::scale(dsc.f32(), dsc.numel(), inv);
  Tensor da = alloc(rows, 4 * C, "grad.act.moe.fc.gelu");
  ops::linear_backward(da.f32(), g.proj_w, g.proj_b, dsc.f32(), m.a[u].f32(), w.proj_w, rows, 4 * C,
                       C);
  Tensor dh = alloc(rows, 4 * C, "grad.act.moe.fc");
  ops::gelu_backward(dh.f32(), m.h[u].f32(), da.f32(), static_cast<size_t>(rows) * 4 * C);
  if (act != DType::kF32) ops::round_to_precision(dh.f32(), dh.numel(), act);
  ops::linear_backward(dxin, g.fc_w, g.fc_b, dh.f32(), m.xin[u].f32(), w.fc_w, rows, C, 4 * C);
  if (ep_ > 1) ops::scale(dxin, static_cast<size_t>(rows) * C, static_cast<float>(ep_));
}

void MoeLayer::backward(MoeActs& m, const float* x, const float* gate_w, float* dgate_w,
                        const float* dy, float* dx, float daux, DType act) {
  const int C = cfg_.d_model, E = moe_.experts, N = m.N;
  std::vector<float> dweight(m.routing.weight.size(), 0.0f);
  if (moe_.dropless) {
    dropless_backward(m, dy, dweight, dx, act);
  } else {
    gshard_backward(m, dy, dweight, dx, act);
  }
  std::vector<float> dl = router_backward(m.routing, dweight, daux);
  Tensor dlogits = alloc(N, E, "grad.act.moe.logits");
  ops::from_host(dlogits.f32(), dl.data(), dl.size() * sizeof(float));
  ops::linear_backward(dx, dgate_w, nullptr, dlogits.f32(), x, gate_w, N, C, E);
}

}  // namespace fl::model
