#include "workloads/model/gpt.hpp"

#include "injector/site.hpp"
#include "kernels/ops.hpp"
#include "workloads/model/moe.hpp"

namespace fl::model {

const float* StageActs::output() const {
  return layers.empty() ? input.f32() : layers.back().res3.f32();
}

const float* FlatParams::acquire(int g, bool) {
  return params_ + layout_.groups()[static_cast<size_t>(g)].lo;
}

float* FlatParams::grads(int g) {
  return grads_ + layout_.groups()[static_cast<size_t>(g)].lo;
}

GptStage::GptStage(const GptConfig& cfg, const ParamLayout& layout, comm::Communicator* tp_group,
                   MemoryAccountant& acct)
    : cfg_(cfg),
      layout_(layout),
      tp_(tp_group),
      tp_size_(tp_group ? tp_group->size() : 1),
      acct_(acct) {}

Tensor GptStage::alloc(std::vector<int64_t> shape, const std::string& what) {
  return Tensor::zeros(std::move(shape), DType::kF32, what, acct_);
}

Tensor GptStage::upload(const int32_t* host, int n, const std::string& what) {
  Tensor t = Tensor::zeros({n}, DType::kI32, what, acct_);
  ops::from_host(t.raw(), host, static_cast<size_t>(n) * sizeof(int32_t));
  return t;
}

void GptStage::tp_all_reduce(float* data, size_t n) {
  if (tp_ && tp_size_ > 1) tp_->all_reduce(comm::device_buffer(data, n, DType::kF32));
}

void GptStage::rnd(Tensor& t) {
  if (act_ != DType::kF32) ops::round_to_precision(t.f32(), t.numel(), act_);
}

void GptStage::round_grads(float* grads, const std::string& prefix, size_t base) {
  if (act_ == DType::kF32) return;
  for (const auto& s : layout_.specs()) {
    if (s.name.rfind(prefix, 0) == 0) {
      ops::round_to_precision(grads + (s.offset - base), s.numel(), act_);
    }
  }
}

std::unique_ptr<StageActs> GptStage::forward(const float* params, const int32_t* tokens,
                                             const float* x_in, const int32_t* targets, int B,
                                             int T) {
  FlatParams flat(layout_, params, nullptr);
  return forward(flat, tokens, x_in, targets, B, T);
}

void GptStage::block_forward(LayerActs& L, const float* x, const BlockParams& w, int l, int B,
                             int T) {
  const int C = cfg_.d_model;
  const int Cl = C / tp_size_, NHl = cfg_.heads / tp_size_, N = B * T;
  const std::string n = "act.h" + std::to_string(l) + ".";
  L.ln1 = alloc({N, C}, n + "ln1");
  L.ln1_mean = alloc({N}, n + "ln1.mean");
  L.ln1_rstd = alloc({N}, n + "ln1.rstd");
  ops::layernorm_forward(L.ln1.f32(), L.ln1_mean.f32(), L.ln1_rstd.f32(), x, w.ln1_w, w.ln1_b, N,
                         C);
  rnd(L.ln1);
  L.qkv = alloc({N, 3 * Cl}, n + "qkv");
  ops::linear_forward(L.qkv.f32(), L.ln1.f32(), w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  rnd(L.qkv);
  L.att = alloc({B, NHl, T, T}, n + "att");
  L.atty = alloc({N, Cl}, n + "atty");
  ops::attention_forward(L.atty.f32(), L.att.f32(), L.qkv.f32(), B, T, Cl, NHl);
  rnd(L.att);
  rnd(L.atty);
  L.attproj = alloc({N, C}, n + "attproj");
  ops::linear_forward(L.attproj.f32(), L.atty.f32(), w.proj_w, nullptr, N, Cl, C);
  tp_all_reduce(L.attproj.f32(), static_cast<size_t>(N) * C);
  ops::add_bias(L.attproj.f32(), w.proj_b, N, C);
  rnd(L.attproj);
  L.res2 = alloc({N, C}, n + "res2");
  ops::residual_forward(L.res2.f32(), x, L.attproj.f32(), static_cast<size_t>(N) * C);
  rnd(L.res2);
  L.ln2 = alloc({N, C}, n + "ln2");
  L.ln2_mean = alloc({N}, n + "ln2.mean");
  L.ln2_rstd = alloc({N}, n + "ln2.rstd");
  ops::layernorm_forward(L.ln2.f32(), L.ln2_mean.f32(), L.ln2_rstd.f32(), L.res2.f32(), w.ln2_w,
                         w.ln2_b, N, C);
  rnd(L.ln2);
  mlp_forward(L, w, l, N);
  rnd(L.fcproj);
  L.res3 = alloc({N, C}, n + "res3");
  ops::residual_forward(L.res3.f32(), L.res2.f32(), L.fcproj.f32(), static_cast<size_t>(N) * C);
  rnd(L.res3);
}

void GptStage::mlp_forward(LayerActs& L, const BlockParams& w, int l, int N) {
  const int C = cfg_.d_model, Cl = C / tp_size_;
  if (w.gate_w != nullptr) {
    if (moe_ == nullptr) raise("block {} is an MoE block but the stage has no experts attached", l);
    L.moe = moe_->forward(L.ln2.f32(), w.gate_w, l, N, act_);
    L.fcproj = std::move(L.moe->y);
    return;
  }
  const std::string n = "act.h" + std::to_string(l) + ".";
  L.fch = alloc({N, 4 * Cl}, n + "fch");
  ops::linear_forward(L.fch.f32(), L.ln2.f32(), w.fc_w, w.fc_b, N, C, 4 * Cl);
  rnd(L.fch);
  L.fch_gelu = alloc({N, 4 * Cl}, n + "fch.gelu");
  ops::gelu_forward(L.fch_gelu.f32(), L.fch.f32(), static_cast<size_t>(N) * 4 * Cl);
  rnd(L.fch_gelu);
  L.fcproj = alloc({N, C}, n + "fcproj");
  ops::linear_forward(L.fcproj.f32(), L.fch_gelu.f32(), w.fcproj_w, nullptr, N, 4 * Cl, C);
  tp_all_reduce(L.fcproj.f32(), static_cast<size_t>(N) * C);
  ops::add_bias(L.fcproj.f32(), w.fcproj_b, N, C);
}

std::unique_ptr<StageActs> GptStage::forward(ParamAccess& pa, const int32_t* tokens,
                                             const float* x_in, const int32_t* targets, int B,
                                             int T) {
  if (T > cfg_.seq_len) raise("sequence length {} exceeds the model's context {}", T, cfg_.seq_len);
  const int C = cfg_.d_model, N = B * T;
  const auto& groups = layout_.groups();
  auto a = std::make_unique<StageActs>();
  a->B = B;
  a->T = T;
  a->input = alloc({B, T, C}, "act.input");
  if (layout_.has_embedding()) {
    embed_forward(*a, pa, tokens);
  } else {
    ops::copy(a->input.f32(), x_in, static_cast<size_t>(N) * C);
  }
  const float* x = a->input.f32();
  for (int li = 0; li < layout_.num_layers(); ++li) {
    const int l = layout_.first_layer() + li, g = block_group(li);
    const size_t base = groups[static_cast<size_t>(g)].lo;
    BlockParams w = layout_.block(const_cast<float*>(pa.acquire(g, false)), l, base);
    LayerActs& L = a->layers.emplace_back();
    block_forward(L, x, w, l, B, T);
    if (L.moe) a->moe_aux += L.moe->aux;
    pa.release(g, false);
    if (checkpointing_) {
      // Keep the block's output (the next block's input and this one's recomputation anchor).
      Tensor out = std::move(L.res3);
      L = LayerActs{};
      L.res3 = std::move(out);
    }
    x = L.res3.f32();
  }
  if (layout_.has_head()) head_forward(*a, pa, x, targets);
  if (layout_.has_head() && moe_ != nullptr) a->loss += cfg_.moe.aux_loss_coef * a->moe_aux;
  return a;
}

void GptStage::backward(StageActs& a, const float* params, float* grads, float dloss,
                        const float* dx_out, float* dx_in) {
  FlatParams flat(layout_, params, grads);
  backward(a, flat, dloss, dx_out, dx_in);
}

void GptStage::block_backward(StageActs& a, ParamAccess& pa, int li, Tensor& dx) {
  const int C = cfg_.d_model, B = a.B, T = a.T;
  const int Cl = C / tp_size_, NHl = cfg_.heads / tp_size_, N = B * T;
  const int l = layout_.first_layer() + li, gi = block_group(li);
  const size_t base = layout_.groups()[static_cast<size_t>(gi)].lo;
  BlockParams w = layout_.block(const_cast<float*>(pa.acquire(gi, true)), l, base);
  BlockParams g = layout_.block(pa.grads(gi), l, base);
  LayerActs& L = a.layers[static_cast<size_t>(li)];
  const float* x = li == 0 ? a.input.f32() : a.layers[static_cast<size_t>(li) - 1].res3.f32();
  const bool recomputed = !L.ln1.defined();
  if (recomputed) block_forward(L, x, w, l, B, T);  // activation checkpointing
  const std::string n = "grad.act.h" + std::to_string(l) + ".";
  // res3 = res2 + fcproj: dx flows to both.
  Tensor dgelu, dfch;  // the dense MLP's gradients live to the end of the block, as before
  Tensor dln2 = mlp_backward(a, L, w, g, dx, l, dgelu, dfch);
  tp_all_reduce(dln2.f32(), static_cast<size_t>(N) * C);
  rnd(dln2);
  // dres2 = dx (residual) + layernorm backward of dln2
  ops::layernorm_backward(dx.f32(), g.ln2_w, g.ln2_b, dln2.f32(), L.res2.f32(), w.ln2_w,
                          L.ln2_mean.f32(), L.ln2_rstd.f32(), N, C);
  rnd(dx);
  // res2 = x + attproj
  ops::bias_backward(g.proj_b, dx.f32(), N, C);
  Tensor datty = alloc({N, Cl}, n + "atty");
  ops::linear_backward(datty.f32(), g.proj_w, nullptr, dx.f32(), L.atty.f32(), w.proj_w, N, Cl, C);
  rnd(datty);
  Tensor dqkv = alloc({N, 3 * Cl}, n + "qkv");
  ops::attention_backward(dqkv.f32(), datty.f32(), L.qkv.f32(), L.att.f32(), B, T, Cl, NHl);
  rnd(dqkv);
  Tensor dln1 = alloc({N, C}, n + "ln1");
  ops::linear_backward(dln1.f32(), g.qkv_w, g.qkv_b, dqkv.f32(), L.ln1.f32(), w.qkv_w, N, C,
                       3 * Cl);
  tp_all_reduce(dln1.f32(), static_cast<size_t>(N) * C);
  rnd(dln1);
  ops::layernorm_backward(dx.f32(), g.ln1_w, g.ln1_b, dln1.f32(), x, w.ln1_w, L.ln1_mean.f32(),
                          L.ln1_rstd.f32(), N, C);
  rnd(dx);
  round_grads(pa.grads(gi), "h" + std::to_string(l) + ".", base);
  pa.release(gi, true);
  pa.grads_done(gi);
  if (recomputed) L = LayerActs{};
}

Tensor GptStage::mlp_backward(StageActs& a, LayerActs& L, const BlockParams& w,
                              const BlockParams& g, Tensor& dx, int l, Tensor& dgelu,
                              Tensor& dfch) {
  const int C = cfg_.d_model, N = a.B * a.T, Cl = C / tp_size_;
  const std::string n = "grad.act.h" + std::to_string(l) + ".";
  if (L.moe) {
    Tensor dln2 = alloc({N, C}, n + "ln2");
    moe_->backward(*L.moe, L.ln2.f32(), w.gate_w, g.gate_w, dx.f32(), dln2.f32(),
                   a.dloss * cfg_.moe.aux_loss_coef, act_);
    return dln2;
  }
  ops::bias_backward(g.fcproj_b, dx.f32(), N, C);
  dgelu = alloc({N, 4 * Cl}, n + "fch.gelu");
  ops::linear_backward(dgelu.f32(), g.fcproj_w, nullptr, dx.f32(), L.fch_gelu.f32(), w.fcproj_w, N,
                       4 * Cl, C);
  rnd(dgelu);
  dfch = alloc({N, 4 * Cl}, n + "fch");
  ops::gelu_backward(dfch.f32(), L.fch.f32(), dgelu.f32(), static_cast<size_t>(N) * 4 * Cl);
  rnd(dfch);
  Tensor dln2 = alloc({N, C}, n + "ln2");
  ops::linear_backward(dln2.f32(), g.fc_w, g.fc_b, dfch.f32(), L.ln2.f32(), w.fc_w, N, C, 4 * Cl);
  return dln2;
}

void GptStage::backward(StageActs& a, ParamAccess& pa, float dloss, const float* dx_out,
                        float* dx_in) {
  const int C = cfg_.d_model, B = a.B, T = a.T, N = B * T;
  a.dloss = dloss;
  // dx: gradient flowing backwards through the residual stream.
  Tensor dx = alloc({N, C}, "grad.act.residual");
  if (layout_.has_head()) {
    head_backward(a, pa, dloss, dx);
  } else {
    ops::copy(dx.f32(), dx_out, static_cast<size_t>(N) * C);
  }
  for (int li = layout_.num_layers() - 1; li >= 0; --li) block_backward(a, pa, li, dx);
  if (layout_.has_embedding()) embed_backward(a, pa, dx);
  if (dx_in) ops::copy(dx_in, dx.f32(), static_cast<size_t>(N) * C);
}

}  // namespace fl::model
