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

GptStage::GroupView GptStage::group(ParamAccess& pa, int g, bool backward) {
  GroupView v;
  v.format = pa.stored();
  v.base = layout_.groups()[static_cast<size_t>(g)].lo;
  v.values = pa.acquire_stored(g, backward);
  if (backward) v.grads = pa.grads_stored(g);
  return v;
}

GptStage::OpParam GptStage::param(const GroupView& v, const std::string& name) {
  const ParamSpec& s = layout_.spec(name);
  if (s.offset < v.base) raise("parameter '{}' lies before element {} of the group", name, v.base);
  const size_t off = s.offset - v.base;
  OpParam p;
  if (v.format == DType::kF32) {
    p.p = static_cast<const float*>(v.values) + off;
    return p;
  }
  p.scratch =
      Tensor::zeros({static_cast<int64_t>(s.numel())}, DType::kF32, "buffer.params_f32", acct_);
  ops::decode(static_cast<const char*>(v.values) + off * dtype_size(v.format), v.format,
              p.scratch.f32(), s.numel());
  p.p = p.scratch.f32();
  return p;
}

GptStage::OpGrad::OpGrad(Tensor scratch, void* dst, DType format)
    : p_(scratch.f32()), scratch_(std::move(scratch)), dst_(dst), format_(format) {}

GptStage::OpGrad::OpGrad(OpGrad&& o) noexcept
    : p_(o.p_), scratch_(std::move(o.scratch_)), dst_(o.dst_), format_(o.format_) {
  o.dst_ = nullptr;
}

GptStage::OpGrad::~OpGrad() {
  // The op's sums, rounded to the format as they are stored (what round_grads does in fp32).
  if (dst_) ops::encode(p_, dst_, format_, scratch_.numel());
}

GptStage::OpGrad GptStage::grad(const GroupView& v, const std::string& name) {
  const ParamSpec& s = layout_.spec(name);
  if (s.offset < v.base) raise("parameter '{}' lies before element {} of the group", name, v.base);
  const size_t off = s.offset - v.base;
  if (v.format == DType::kF32) return OpGrad(static_cast<float*>(v.grads) + off);
  void* dst = static_cast<char*>(v.grads) + off * dtype_size(v.format);
  Tensor t =
      Tensor::zeros({static_cast<int64_t>(s.numel())}, DType::kF32, "buffer.grads_f32", acct_);
  ops::decode(dst, v.format, t.f32(), s.numel());
  return OpGrad(std::move(t), dst, v.format);
}

Tensor GptStage::out(std::vector<int64_t> shape, const std::string& what) {
  return alloc(std::move(shape), act_ == DType::kF32 ? what : "buffer.act_f32");
}

Tensor GptStage::keep(Tensor t, const std::string& what, bool as_f32) {
  rnd(t);
  if (act_ == DType::kF32) return t;
  if (as_f32) {
    Tensor kept = alloc(t.shape(), what);
    ops::copy(kept.f32(), t.f32(), t.numel());
    return kept;
  }
  Tensor kept = Tensor::zeros(t.shape(), act_, what, acct_);
  ops::encode(t.f32(), kept.raw(), act_, t.numel());
  return kept;
}

Tensor GptStage::f32(const Tensor& kept) {
  if (kept.dtype() == DType::kF32) return kept;
  Tensor t = Tensor::zeros(kept.shape(), DType::kF32, "buffer.act_f32", acct_);
  ops::decode(kept.raw(), kept.dtype(), t.f32(), t.numel());
  return t;
}

void GptStage::linear_backward(const GroupView& w, const std::string& weight,
                               const std::string& bias, float* dinp, const float* dout,
                               const float* inp, int N, int C, int OC) {
  if (w.format == DType::kF32) {
    OpParam m = param(w, weight);
    OpGrad gm = grad(w, weight);
    if (bias.empty()) {
      ops::linear_backward(dinp, gm.get(), nullptr, dout, inp, m.p, N, C, OC);
    } else {
      OpGrad gb = grad(w, bias);
      ops::linear_backward(dinp, gm.get(), gb.get(), dout, inp, m.p, N, C, OC);
    }
    return;
  }
  // 16-bit: the input gradient with the decoded weight, then the weight's (and bias') gradients
  // in their scratch, so the op never holds both (each output is its own GEMM either way).
  {
    OpParam m = param(w, weight);
    ops::linear_backward(dinp, nullptr, nullptr, dout, inp, m.p, N, C, OC);
  }
  OpGrad gm = grad(w, weight);
  if (bias.empty()) {
    ops::linear_backward(nullptr, gm.get(), nullptr, dout, inp, nullptr, N, C, OC);
  } else {
    OpGrad gb = grad(w, bias);
    ops::linear_backward(nullptr, gm.get(), gb.get(), dout, inp, nullptr, N, C, OC);
  }
}

std::unique_ptr<StageActs> GptStage::forward(const float* params, const int32_t* tokens,
                                             const float* x_in, const int32_t* targets, int B,
                                             int T) {
  FlatParams flat(layout_, params, nullptr);
  return forward(flat, tokens, x_in, targets, B, T);
}

void GptStage::block_forward(LayerActs& L, const Tensor& x_kept, const GroupView& w, int l, int B,
                             int T) {
  const int C = cfg_.d_model;
  const int Cl = C / tp_size_, NHl = cfg_.heads / tp_size_, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const std::string n = "act.h" + std::to_string(l) + ".", p = "h" + std::to_string(l) + ".";
  // Each op reads its inputs in fp32 (the kept tensors, or scratch decoded from them) and its
  // parameters one at a time; its output is kept in the activation format.
  L.ln1_mean = alloc({N}, n + "ln1.mean");
  L.ln1_rstd = alloc({N}, n + "ln1.rstd");
  {
    Tensor x = f32(x_kept), y = out({N, C}, n + "ln1");
    OpParam g = param(w, p + "ln1.weight"), b = param(w, p + "ln1.bias");
    ops::layernorm_forward(y.f32(), L.ln1_mean.f32(), L.ln1_rstd.f32(), x.f32(), g.p, b.p, N, C);
    L.ln1 = keep(std::move(y), n + "ln1");
  }
  {
    Tensor x = f32(L.ln1), y = out({N, 3 * Cl}, n + "qkv");
    OpParam m = param(w, p + "attn.qkv.weight"), b = param(w, p + "attn.qkv.bias");
    ops::linear_forward(y.f32(), x.f32(), m.p, b.p, N, C, 3 * Cl);
    L.qkv = keep(std::move(y), n + "qkv");
  }
  {
    Tensor x = f32(L.qkv), y = out({N, Cl}, n + "atty"), att = out({B, NHl, T, T}, n + "att");
    ops::attention_forward(y.f32(), att.f32(), x.f32(), B, T, Cl, NHl);
    L.att = keep(std::move(att), n + "att");
    L.atty = keep(std::move(y), n + "atty");
  }
  {
    Tensor x = f32(L.atty), y = out({N, C}, n + "attproj");
    {
      OpParam m = param(w, p + "attn.proj.weight");
      ops::linear_forward(y.f32(), x.f32(), m.p, nullptr, N, Cl, C);
    }
    tp_all_reduce(y.f32(), NC);
    OpParam b = param(w, p + "attn.proj.bias");
    ops::add_bias(y.f32(), b.p, N, C);
    L.attproj = keep(std::move(y), n + "attproj");
  }
  {
    Tensor x = f32(x_kept), d = f32(L.attproj), y = out({N, C}, n + "res2");
    ops::residual_forward(y.f32(), x.f32(), d.f32(), NC);
    L.res2 = keep(std::move(y), n + "res2");
  }
  block_mlp_forward(L, w, l, B, T);
}

void GptStage::block_mlp_forward(LayerActs& L, const GroupView& w, int l, int B, int T) {
  const int C = cfg_.d_model, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const std::string n = "act.h" + std::to_string(l) + ".", p = "h" + std::to_string(l) + ".";
  L.ln2_mean = alloc({N}, n + "ln2.mean");
  L.ln2_rstd = alloc({N}, n + "ln2.rstd");
  {
    Tensor x = f32(L.res2), y = out({N, C}, n + "ln2");
    OpParam g = param(w, p + "ln2.weight"), b = param(w, p + "ln2.bias");
    ops::layernorm_forward(y.f32(), L.ln2_mean.f32(), L.ln2_rstd.f32(), x.f32(), g.p, b.p, N, C);
    L.ln2 = keep(std::move(y), n + "ln2");
  }
  mlp_forward(L, w, l, N);
  {
    Tensor r = f32(L.res2), d = f32(L.fcproj), y = out({N, C}, n + "res3");
    ops::residual_forward(y.f32(), r.f32(), d.f32(), NC);
    // The last block's output of a stage without the head is what the pipeline sends: fp32.
    const bool sent = !layout_.has_head() && l == layout_.first_layer() + layout_.num_layers() - 1;
    L.res3 = keep(std::move(y), n + "res3", sent);
  }
}

void GptStage::mlp_forward(LayerActs& L, const GroupView& w, int l, int N) {
  const int C = cfg_.d_model, Cl = C / tp_size_;
  const size_t NC = static_cast<size_t>(N) * C, N4 = static_cast<size_t>(N) * 4 * Cl;
  const std::string n = "act.h" + std::to_string(l) + ".", p = "h" + std::to_string(l) + ".";
  if (cfg_.moe.is_moe_layer(l)) {
    if (moe_ == nullptr) raise("block {} is an MoE block but the stage has no experts attached", l);
    {
      Tensor x = f32(L.ln2);
      OpParam gate = param(w, p + "moe.gate.weight");
      L.moe = moe_->forward(x.f32(), gate.p, l, N, act_);
    }
    L.fcproj = keep(std::move(L.moe->y), n + "fcproj");
    return;
  }
  {
    Tensor x = f32(L.ln2), y = out({N, 4 * Cl}, n + "fch");
    OpParam m = param(w, p + "mlp.fc.weight"), b = param(w, p + "mlp.fc.bias");
    ops::linear_forward(y.f32(), x.f32(), m.p, b.p, N, C, 4 * Cl);
    L.fch = keep(std::move(y), n + "fch");
  }
  {
    Tensor x = f32(L.fch), y = out({N, 4 * Cl}, n + "fch.gelu");
    ops::gelu_forward(y.f32(), x.f32(), N4);
    L.fch_gelu = keep(std::move(y), n + "fch.gelu");
  }
  {
    Tensor x = f32(L.fch_gelu), y = out({N, C}, n + "fcproj");
    {
      OpParam m = param(w, p + "mlp.proj.weight");
      ops::linear_forward(y.f32(), x.f32(), m.p, nullptr, N, 4 * Cl, C);
    }
    tp_all_reduce(y.f32(), NC);
    OpParam b = param(w, p + "mlp.proj.bias");
    ops::add_bias(y.f32(), b.p, N, C);
    L.fcproj = keep(std::move(y), n + "fcproj");
  }
}

std::unique_ptr<StageActs> GptStage::forward(ParamAccess& pa, const int32_t* tokens,
                                             const float* x_in, const int32_t* targets, int B,
                                             int T) {
  if (T > cfg_.seq_len) raise("sequence length {} exceeds the model's context {}", T, cfg_.seq_len);
  const int C = cfg_.d_model, N = B * T;
  auto a = std::make_unique<StageActs>();
  a->B = B;
  a->T = T;
  {
    Tensor input = out({B, T, C}, "act.input");
    if (layout_.has_embedding()) {
      embed_forward(*a, pa, tokens, input);
    } else {
      ops::copy(input.f32(), x_in, static_cast<size_t>(N) * C);
    }
    const bool sent = !layout_.has_head() && layout_.num_layers() == 0;
    a->input = keep(std::move(input), "act.input", sent);
  }
  Tensor x = a->input;
  for (int li = 0; li < layout_.num_layers(); ++li) {
    const int l = layout_.first_layer() + li, g = block_group(li);
    const GroupView w = group(pa, g, false);
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
    x = L.res3;
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
  const int l = layout_.first_layer() + li, gi = block_group(li);
  const GroupView w = group(pa, gi, true);
  LayerActs& L = a.layers[static_cast<size_t>(li)];
  const Tensor& x = li == 0 ? a.input : a.layers[static_cast<size_t>(li) - 1].res3;
  const bool recomputed = !L.ln1.defined();
  if (recomputed) block_forward(L, x, w, l, a.B, a.T);  // activation checkpointing
  block_mlp_backward(a, L, w, l, dx);
  block_attention_backward(a, L, x, w, l, dx);
  // fp32 groups: the gradients rounded to the activation format (16-bit groups were rounded as
  // each op's gradients were stored).
  if (w.format == DType::kF32) {
    round_grads(static_cast<float*>(w.grads), "h" + std::to_string(l) + ".", w.base);
  }
  pa.release(gi, true);
  pa.grads_done(gi);
  if (recomputed) L = LayerActs{};
}

void GptStage::block_mlp_backward(StageActs& a, LayerActs& L, const GroupView& w, int l,
                                  Tensor& dx) {
  const int C = cfg_.d_model, N = a.B * a.T;
  const std::string p = "h" + std::to_string(l) + ".";
  // res3 = res2 + fcproj: dx flows to both.
  Tensor dfch;  // the dense MLP's: freed with the rest of this function's gradients
  Tensor dln2 = mlp_backward(a, L, w, l, dx, dfch);
  tp_all_reduce(dln2.f32(), static_cast<size_t>(N) * C);
  rnd(dln2);
  // dres2 = dx (residual) + layernorm backward of dln2
  {
    Tensor x = f32(L.res2);
    OpParam g = param(w, p + "ln2.weight");
    OpGrad gg = grad(w, p + "ln2.weight"), gb = grad(w, p + "ln2.bias");
    ops::layernorm_backward(dx.f32(), gg.get(), gb.get(), dln2.f32(), x.f32(), g.p,
                            L.ln2_mean.f32(), L.ln2_rstd.f32(), N, C);
  }
  rnd(dx);
}

Tensor GptStage::mlp_backward(StageActs& a, LayerActs& L, const GroupView& w, int l, Tensor& dx,
                              Tensor& dfch) {
  const int C = cfg_.d_model, Cl = C / tp_size_, N = a.B * a.T;
  const std::string n = "grad.act.h" + std::to_string(l) + ".", p = "h" + std::to_string(l) + ".";
  if (L.moe) {
    Tensor dln2 = alloc({N, C}, n + "ln2");
    Tensor x = f32(L.ln2);
    OpParam gate = param(w, p + "moe.gate.weight");
    OpGrad dgate = grad(w, p + "moe.gate.weight");
    moe_->backward(*L.moe, x.f32(), gate.p, dgate.get(), dx.f32(), dln2.f32(),
                   a.dloss * cfg_.moe.aux_loss_coef, act_);
    return dln2;
  }
  {
    OpGrad gb = grad(w, p + "mlp.proj.bias");
    ops::bias_backward(gb.get(), dx.f32(), N, C);
  }
  Tensor dgelu = alloc({N, 4 * Cl}, n + "fch.gelu");
  {
    Tensor x = f32(L.fch_gelu);
    linear_backward(w, p + "mlp.proj.weight", "", dgelu.f32(), dx.f32(), x.f32(), N, 4 * Cl, C);
  }
  rnd(dgelu);
  dfch = alloc({N, 4 * Cl}, n + "fch");
  {
    Tensor x = f32(L.fch);
    ops::gelu_backward(dfch.f32(), x.f32(), dgelu.f32(), static_cast<size_t>(N) * 4 * Cl);
  }
  rnd(dfch);
  dgelu.release();
  Tensor dln2 = alloc({N, C}, n + "ln2");
  {
    Tensor x = f32(L.ln2);
    linear_backward(w, p + "mlp.fc.weight", p + "mlp.fc.bias", dln2.f32(), dfch.f32(), x.f32(), N,
                    C, 4 * Cl);
  }
  return dln2;
}

void GptStage::block_attention_backward(StageActs& a, LayerActs& L, const Tensor& x_kept,
                                        const GroupView& w, int l, Tensor& dx) {
  const int C = cfg_.d_model, B = a.B, T = a.T;
  const int Cl = C / tp_size_, NHl = cfg_.heads / tp_size_, N = B * T;
  const std::string n = "grad.act.h" + std::to_string(l) + ".", p = "h" + std::to_string(l) + ".";
  // res2 = x + attproj
  {
    OpGrad gb = grad(w, p + "attn.proj.bias");
    ops::bias_backward(gb.get(), dx.f32(), N, C);
  }
  Tensor datty = alloc({N, Cl}, n + "atty");
  {
    Tensor x = f32(L.atty);
    linear_backward(w, p + "attn.proj.weight", "", datty.f32(), dx.f32(), x.f32(), N, Cl, C);
  }
  rnd(datty);
  Tensor dqkv = alloc({N, 3 * Cl}, n + "qkv");
  {
    Tensor qkv = f32(L.qkv), att = f32(L.att);
    ops::attention_backward(dqkv.f32(), datty.f32(), qkv.f32(), att.f32(), B, T, Cl, NHl);
  }
  rnd(dqkv);
  datty.release();
  Tensor dln1 = alloc({N, C}, n + "ln1");
  {
    Tensor x = f32(L.ln1);
    linear_backward(w, p + "attn.qkv.weight", p + "attn.qkv.bias", dln1.f32(), dqkv.f32(), x.f32(),
                    N, C, 3 * Cl);
  }
  tp_all_reduce(dln1.f32(), static_cast<size_t>(N) * C);
  rnd(dln1);
  {
    Tensor x = f32(x_kept);
    OpParam g = param(w, p + "ln1.weight");
    OpGrad gg = grad(w, p + "ln1.weight"), gb = grad(w, p + "ln1.bias");
    ops::layernorm_backward(dx.f32(), gg.get(), gb.get(), dln1.f32(), x.f32(), g.p,
                            L.ln1_mean.f32(), L.ln1_rstd.f32(), N, C);
  }
  rnd(dx);
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
