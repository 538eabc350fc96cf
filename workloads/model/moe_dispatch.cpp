// How tokens reach their experts and come back: GShard's [experts, capacity, C] buffers over the
// expert-parallel all-to-all, and Mixtral's loop over the experts that received tokens. Host
// staging (the exchange is a host buffer on CPU ranks as on the MPI backend).
#include <algorithm>
#include <string>

#include "kernels/ops.hpp"
#include "workloads/model/moe.hpp"

namespace fl::model {

namespace {

std::vector<float> to_host_vector(const float* dev, size_t n) {
  std::vector<float> h(n);
  ops::to_host(h.data(), dev, n * sizeof(float));
  return h;
}

float row_dot(const float* a, const float* b, int C) {
  float s = 0;
  for (int c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

void row_axpy(float* y, float w, const float* x, int C) {
  for (int c = 0; c < C; ++c) y[c] += w * x[c];
}

}  // namespace

void MoeLayer::gshard_forward(MoeActs& m, const float* x, DType act) {
  const Routing& r = m.routing;
  const int C = cfg_.d_model, cap = r.capacity, rows = ep_ * cap;
  const size_t block = static_cast<size_t>(cap) * C;  // one expert's buffer
  const std::vector<float> xh = to_host_vector(x, static_cast<size_t>(m.N) * C);
  std::vector<float> dispatch(static_cast<size_t>(r.E) * block, 0.0f);  // [E, cap, C]
  for (size_t slot = 0; slot < r.location.size(); ++slot) {
    if (r.location[slot] < 0) continue;
    const size_t s = slot / static_cast<size_t>(r.k);
    std::copy_n(xh.data() + s * C, C,
                dispatch.data() + static_cast<size_t>(r.expert[slot]) * block +
                    static_cast<size_t>(r.location[slot]) * C);
  }
  // [ep, E_local, cap, C] to the owners; back comes [source rank, E_local, cap, C].
  const std::vector<float> recv = exchange(std::move(dispatch));
  std::vector<float> back(recv.size());
  if (moe_.z3_leaf) acquire_all(m.layer, false);
  for (int j = 0; j < local_; ++j) {
    std::vector<float> xin(static_cast<size_t>(rows) * C);
    for (int src = 0; src < ep_; ++src) {
      std::copy_n(recv.data() + static_cast<size_t>(src * local_ + j) * block, block,
                  xin.data() + static_cast<size_t>(src) * block);
    }
    const auto u = static_cast<size_t>(j);
    m.xin[u] = alloc(rows, C, "act.h" + std::to_string(m.layer) + ".moe.dispatched");
    ops::from_host(m.xin[u].f32(), xin.data(), xin.size() * sizeof(float));
    const int g = group_of(m.layer, j);
    expert_forward(m, j, weights(m.layer, j, params_.acquire(g, false)), rows, act);
    if (!moe_.z3_leaf) params_.release(g, false);
    const std::vector<float> out = to_host_vector(m.out[u].f32(), xin.size());
    for (int src = 0; src < ep_; ++src) {
      std::copy_n(out.data() + static_cast<size_t>(src) * block, block,
                  back.data() + static_cast<size_t>(src * local_ + j) * block);
    }
  }
  if (moe_.z3_leaf) release_all(m.layer, false);
  m.combined = exchange(std::move(back));  // [E, cap, C] at the tokens' rank
  std::vector<float> y(static_cast<size_t>(m.N) * C, 0.0f);
  for (size_t slot = 0; slot < r.location.size(); ++slot) {
    if (r.location[slot] < 0) continue;
    const size_t s = slot / static_cast<size_t>(r.k);
    row_axpy(y.data() + s * C, r.weight[slot],
             m.combined.data() + static_cast<size_t>(r.expert[slot]) * block +
                 static_cast<size_t>(r.location[slot]) * C,
             C);
  }
  ops::from_host(m.y.f32(), y.data(), y.size() * sizeof(float));
}

void MoeLayer::gshard_backward(MoeActs& m, const float* dy, std::vector<float>& dweight, float* dx,
                               DType act) {
  const Routing& r = m.routing;
  const int C = cfg_.d_model, cap = r.capacity, rows = ep_ * cap;
  const size_t block = static_cast<size_t>(cap) * C;
  const std::vector<float> dyh = to_host_vector(dy, static_cast<size_t>(m.N) * C);
  std::vector<float> dcombined(static_cast<size_t>(r.E) * block, 0.0f);
  for (size_t slot = 0; slot < r.location.size(); ++slot) {
    if (r.location[slot] < 0) continue;
    const size_t s = slot / static_cast<size_t>(r.k);
    const size_t at =
        static_cast<size_t>(r.expert[slot]) * block + static_cast<size_t>(r.location[slot]) * C;
    dweight[slot] = row_dot(dyh.data() + s * C, m.combined.data() + at, C);
    row_axpy(dcombined.data() + at, r.weight[slot], dyh.data() + s * C, C);
  }
  const std::vector<float> drecv = exchange(std::move(dcombined));
  std::vector<float> dback(drecv.size(), 0.0f);
  if (moe_.z3_leaf) acquire_all(m.layer, true);
  // Last expert first: gradient buckets complete in backward order.
  for (int j = local_ - 1; j >= 0; --j) {
    std::vector<float> dout(static_cast<size_t>(rows) * C);
    for (int src = 0; src < ep_; ++src) {
      std::copy_n(drecv.data() + static_cast<size_t>(src * local_ + j) * block, block,
                  dout.data() + static_cast<size_t>(src) * block);
    }
    Tensor dout_t = alloc(rows, C, "grad.act.moe.dispatched_out");
    ops::from_host(dout_t.f32(), dout.data(), dout.size() * sizeof(float));
    Tensor dxin = alloc(rows, C, "grad.act.moe.dispatched");
    const int g = group_of(m.layer, j);
    const ExpertWeights w = weights(m.layer, j, params_.acquire(g, true));
    float* gr = params_.grads(g);
    expert_backward(m, j, w, grads(m.layer, j, gr), dout_t.f32(), dxin.f32(), rows, act);
    if (act != DType::kF32) {
      ops::round_to_precision(gr, layout_.groups()[static_cast<size_t>(g)].numel(), act);
    }
    if (!moe_.z3_leaf) params_.release(g, true);
    params_.grads_done(g);
    const std::vector<float> dxh = to_host_vector(dxin.f32(), dout.size());
    for (int src = 0; src < ep_; ++src) {
      std::copy_n(dxh.data() + static_cast<size_t>(src) * block, block,
                  dback.data() + static_cast<size_t>(src * local_ + j) * block);
    }
  }
  if (moe_.z3_leaf) release_all(m.layer, true);
  const std::vector<float> dd = exchange(std::move(dback));  // [E, cap, C]
  std::vector<float> dxh = to_host_vector(dx, static_cast<size_t>(m.N) * C);
  for (size_t slot = 0; slot < r.location.size(); ++slot) {
    if (r.location[slot] < 0) continue;
    const size_t s = slot / static_cast<size_t>(r.k);
    row_axpy(dxh.data() + s * C, r.weight[slot],
             dd.data() + static_cast<size_t>(r.expert[slot]) * block +
                 static_cast<size_t>(r.location[slot]) * C,
             C);
  }
  ops::from_host(dx, dxh.data(), dxh.size() * sizeof(float));
}

void MoeLayer::dropless_forward(MoeActs& m, const float* x, DType act) {
  const Routing& r = m.routing;
  const int C = cfg_.d_model;
  // Each expert's slots in location order (torch.where over the [E, k, S] expert mask).
  m.rows.assign(static_cast<size_t>(r.E), {});
  for (auto& v : m.rows) v.reserve(static_cast<size_t>(r.S));
  for (int j = 0; j < r.k; ++j) {
    for (int s = 0; s < r.S; ++s) {
      const size_t slot = static_cast<size_t>(s) * r.k + j;
      m.rows[static_cast<size_t>(r.expert[slot])].push_back(static_cast<int>(slot));
    }
  }
  const std::vector<float> xh = to_host_vector(x, static_cast<size_t>(m.N) * C);
  std::vector<float> y(xh.size(), 0.0f);
  if (moe_.z3_leaf) acquire_all(m.layer, false);
  for (int e = 0; e < r.E; ++e) {
    const auto& slots = m.rows[static_cast<size_t>(e)];
    // transformers: `if top_x.shape[0] == 0: continue` -- the expert's weights are not touched.
    if (slots.empty()) continue;
    const int n = static_cast<int>(slots.size());
    std::vector<float> xin(static_cast<size_t>(n) * C);
    for (int i = 0; i < n; ++i) {
      std::copy_n(xh.data() + static_cast<size_t>(slots[static_cast<size_t>(i)] / r.k) * C, C,
                  xin.data() + static_cast<size_t>(i) * C);
    }
    const auto u = static_cast<size_t>(e);
    m.xin[u] = alloc(n, C, "act.h" + std::to_string(m.layer) + ".moe.routed");
    ops::from_host(m.xin[u].f32(), xin.data(), xin.size() * sizeof(float));
    const int g = group_of(m.layer, e);
    expert_forward(m, e, weights(m.layer, e, params_.acquire(g, false)), n, act);
    if (!moe_.z3_leaf) params_.release(g, false);
    const std::vector<float> out = to_host_vector(m.out[u].f32(), xin.size());
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<size_t>(slots[static_cast<size_t>(i)]);
      row_axpy(y.data() + slot / static_cast<size_t>(r.k) * C, r.weight[slot],
               out.data() + static_cast<size_t>(i) * C, C);
    }
  }
  if (moe_.z3_leaf) release_all(m.layer, false);
  ops::from_host(m.y.f32(), y.data(), y.size() * sizeof(float));
}

void MoeLayer::dropless_backward(MoeActs& m, const float* dy, std::vector<float>& dweight,
                                 float* dx, DType act) {
  const Routing& r = m.routing;
  const int C = cfg_.d_model;
  const std::vector<float> dyh = to_host_vector(dy, static_cast<size_t>(m.N) * C);
  std::vector<float> dxh = to_host_vector(dx, dyh.size());
  if (moe_.z3_leaf) acquire_all(m.layer, true);
  for (int e = r.E - 1; e >= 0; --e) {
    const auto& slots = m.rows[static_cast<size_t>(e)];
    const int g = group_of(m.layer, e);
    if (slots.empty()) {
      // A leaf module's parameters all take part in the backward (zero gradients here).
      if (moe_.z3_leaf) {
        params_.grads(g);
        params_.grads_done(g);
      }
      continue;
    }
    const int n = static_cast<int>(slots.size());
    const auto u = static_cast<size_t>(e);
    const std::vector<float> out = to_host_vector(m.out[u].f32(), static_cast<size_t>(n) * C);
    std::vector<float> dout(out.size(), 0.0f);
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<size_t>(slots[static_cast<size_t>(i)]);
      const float* d = dyh.data() + slot / static_cast<size_t>(r.k) * C;
      dweight[slot] = row_dot(d, out.data() + static_cast<size_t>(i) * C, C);
      row_axpy(dout.data() + static_cast<size_t>(i) * C, r.weight[slot], d, C);
    }
    Tensor dout_t = alloc(n, C, "grad.act.moe.routed_out");
    ops::from_host(dout_t.f32(), dout.data(), dout.size() * sizeof(float));
    Tensor dxin = alloc(n, C, "grad.act.moe.routed");
    const ExpertWeights w = weights(m.layer, e, params_.acquire(g, true));
    float* gr = params_.grads(g);
    expert_backward(m, e, w, grads(m.layer, e, gr), dout_t.f32(), dxin.f32(), n, act);
    if (act != DType::kF32) {
      ops::round_to_precision(gr, layout_.groups()[static_cast<size_t>(g)].numel(), act);
    }
    if (!moe_.z3_leaf) params_.release(g, true);
    params_.grads_done(g);
    const std::vector<float> dxin_h = to_host_vector(dxin.f32(), dout.size());
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<size_t>(slots[static_cast<size_t>(i)]);
      row_axpy(dxh.data() + slot / static_cast<size_t>(r.k) * C, r.weight[slot],
               dxin_h.data() + static_cast<size_t>(i) * C, C);
    }
  }
  if (moe_.z3_leaf) release_all(m.layer, true);
  ops::from_host(dx, dxh.data(), dxh.size() * sizeof(float));
}

}  // namespace fl::model
