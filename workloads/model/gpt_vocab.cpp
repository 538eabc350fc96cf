// The GPT's two ends, where the vocabulary is: the embedding (wte + wpe) and the head (final layer
// norm, LM head, cross entropy). Replicated, or vocab-parallel as Megatron's VocabParallelEmbedding
// and column-parallel head with a vocab-parallel cross entropy or all-gathered logits; under tied
// embeddings the head reads wte (docs/workloads.md#structure).
#include <algorithm>
#include <cmath>

#include "kernels/ops.hpp"
#include "workloads/model/gpt.hpp"

namespace fl::model {

void GptStage::embed_forward(StageActs& a, ParamAccess& pa, const int32_t* tokens, Tensor& out) {
  const int B = a.B, T = a.T, C = cfg_.d_model, N = B * T;
  const int64_t V = layout_.vocab_rows(), lo = layout_.vocab_begin(), n = layout_.local_vocab();
  a.tokens.assign(tokens, tokens + N);
  std::vector<int32_t> local(a.tokens);
  for (int i = 0; i < N; ++i) {
    // A plain lookup refuses an id past the table; Megatron's VocabParallelEmbedding (TP > 1)
    // masks every id outside the rank's rows, so one past the whole table is zero on every rank
    // and nothing fails (NVIDIA/Megatron-LM#1038: mock data past the vocabulary trained at TP 2).
    if (!vocab_split() && (tokens[i] < 0 || tokens[i] >= V)) {
      raise("token id {} at position {} is outside the vocabulary (size {})", tokens[i], i, V);
    }
    // VocabParallelEmbedding: a token outside this rank's rows reads row 0 and is zeroed.
    if (tokens[i] < lo || tokens[i] >= lo + n) {
      a.foreign.push_back(i);
      local[static_cast<size_t>(i)] = 0;
    } else {
      local[static_cast<size_t>(i)] = static_cast<int32_t>(tokens[i] - lo);
    }
  }
  a.tokens_dev = upload(local.data(), N, "act.tokens");
  {
    const GroupView w = group(pa, 0, false);
    OpParam wte = param(w, "wte"), wpe = param(w, "wpe");
    ops::embedding_forward(out.f32(), a.tokens_dev.data<int32_t>(), wte.p, wpe.p, B, T, C);
  }
  pa.release(0, false);
  if (vocab_split()) {
    // The owner's row carries wte + wpe, the others zero: the sum over TP is the embedding.
    for (int i : a.foreign) ops::zero(out.f32() + static_cast<size_t>(i) * C, C * sizeof(float));
    tp_all_reduce(out.f32(), static_cast<size_t>(N) * C);
  }
}

GptStage::GroupView GptStage::head_weight_group(ParamAccess& pa, const GroupView& head,
                                                bool backward) {
  return layout_.head_reads_embedding() ? group(pa, 0, backward) : head;
}

const std::string& GptStage::head_weight_name() const {
  static const std::string wte = "wte";
  return layout_.head_reads_embedding() ? wte : layout_.head_weight();
}

void GptStage::release_head_weight(ParamAccess& pa, bool backward) {
  if (layout_.head_reads_embedding()) pa.release(0, backward);
}

void GptStage::head_forward(StageActs& a, ParamAccess& pa, const Tensor& x_kept,
                            const int32_t* targets) {
  const int C = cfg_.d_model, N = a.B * a.T;
  const int V = static_cast<int>(layout_.vocab_rows()),
            Vl = static_cast<int>(layout_.local_vocab());
  a.targets.assign(targets, targets + N);
  a.targets_dev = upload(targets, N, "act.targets");
  a.lnf_mean = alloc({N}, "act.lnf.mean");
  a.lnf_rstd = alloc({N}, "act.lnf.rstd");
  const GroupView h = group(pa, head_group(), false);
  {
    Tensor x = f32(x_kept), y = out({N, C}, "act.lnf");
    OpParam g = param(h, "lnf.weight"), b = param(h, "lnf.bias");
    ops::layernorm_forward(y.f32(), a.lnf_mean.f32(), a.lnf_rstd.f32(), x.f32(), g.p, b.p, N, C);
    a.lnf = keep(std::move(y), "act.lnf");
  }
  // The logits, rounded to the activation format; softmax and the loss run in fp32 and the
  // probabilities they keep for the backward are fp32 (autocast runs cross entropy in fp32).
  a.probs = alloc({N, Vl}, "act.logits");
  {
    Tensor x = f32(a.lnf);
    OpParam m = param(head_weight_group(pa, h, false), head_weight_name());
    ops::linear_forward(a.probs.f32(), x.f32(), m.p, nullptr, N, C, Vl);
  }
  rnd(a.probs);
  release_head_weight(pa, false);
  pa.release(head_group(), false);
  a.losses = alloc({N}, "act.losses");
  if (vocab_split() && cfg_.structure.parallel_output) {
    a.sharded_probs = true;
    vocab_parallel_cross_entropy(a);
  } else {
    // torch's cross entropy over the whole logits refuses a target past them (the vocab-parallel
    // one above gives it a target logit of 0, as Megatron's masks it).
    for (int k = 0; k < N; ++k) {
      if (targets[k] >= V) {
        raise("IndexError: Target {} is out of bounds (position {}; the logits have {} columns)",
              targets[k], k, V);
      }
    }
    if (vocab_split()) a.probs = gather_logits(a.probs, N);  // parallel_output false
    // In place: logits -> probabilities (the logits are not needed again).
    ops::softmax_cross_entropy_forward(a.losses.f32(), a.probs.f32(), a.probs.f32(),
                                       a.targets_dev.data<int32_t>(), N, V);
  }
  const double sum =
      ops::loss_sum(a.losses.f32(), a.targets_dev.data<int32_t>(), N, &a.valid_targets);
  a.loss = a.valid_targets ? static_cast<float>(sum / a.valid_targets) : 0.0f;
}

void GptStage::vocab_parallel_cross_entropy(StageActs& a) {
  const int N = a.B * a.T;
  const size_t Vl = static_cast<size_t>(layout_.local_vocab());
  const int64_t lo = layout_.vocab_begin();
  std::vector<float> p(static_cast<size_t>(N) * Vl), mx(static_cast<size_t>(N)),
      sum(static_cast<size_t>(N), 0.0f), target(static_cast<size_t>(N), 0.0f);
  ops::to_host(p.data(), a.probs.f32(), p.size() * sizeof(float));
  for (int n = 0; n < N; ++n) {
    const float* row = p.data() + static_cast<size_t>(n) * Vl;
    mx[static_cast<size_t>(n)] = *std::max_element(row, row + Vl);
  }
  tp_->all_reduce(comm::host_buffer(mx.data(), mx.size(), DType::kF32), comm::ReduceOp::kMax);
  for (int n = 0; n < N; ++n) {
    float* row = p.data() + static_cast<size_t>(n) * Vl;
    const size_t k = static_cast<size_t>(n);
    const int64_t t = a.targets[k] - lo;
    // The target's shifted logit, from the rank that holds its row (zero elsewhere).
    if (a.targets[k] >= 0 && t >= 0 && t < static_cast<int64_t>(Vl)) {
      target[k] = row[static_cast<size_t>(t)] - mx[k];
    }
    for (size_t v = 0; v < Vl; ++v) {
      row[v] = std::exp(row[v] - mx[k]);
      sum[k] += row[v];
    }
  }
  tp_->all_reduce(comm::host_buffer(sum.data(), sum.size(), DType::kF32));
  tp_->all_reduce(comm::host_buffer(target.data(), target.size(), DType::kF32));
  std::vector<float> losses(static_cast<size_t>(N), 0.0f);
  for (int n = 0; n < N; ++n) {
    const size_t k = static_cast<size_t>(n);
    for (size_t v = 0; v < Vl; ++v) p[k * Vl + v] /= sum[k];
    if (a.targets[k] >= 0) losses[k] = std::log(sum[k]) - target[k];
  }
  ops::from_host(a.probs.f32(), p.data(), p.size() * sizeof(float));
  ops::from_host(a.losses.f32(), losses.data(), losses.size() * sizeof(float));
}

void GptStage::vocab_parallel_cross_entropy_backward(StageActs& a, float per_token,
                                                     Tensor& dlogits) {
  const int N = a.B * a.T;
  const size_t Vl = static_cast<size_t>(layout_.local_vocab());
  const int64_t lo = layout_.vocab_begin();
  std::vector<float> g(static_cast<size_t>(N) * Vl);
  ops::to_host(g.data(), a.probs.f32(), g.size() * sizeof(float));
  for (int n = 0; n < N; ++n) {
    const size_t k = static_cast<size_t>(n);
    const int32_t target = a.targets[k];
    for (size_t v = 0; v < Vl; ++v) {
      const bool hit = target >= 0 && static_cast<int64_t>(v) + lo == target;
      g[k * Vl + v] = target < 0 ? 0.0f : (g[k * Vl + v] - (hit ? 1.0f : 0.0f)) * per_token;
    }
  }
  ops::from_host(dlogits.f32(), g.data(), g.size() * sizeof(float));
}

Tensor GptStage::gather_logits(const Tensor& local, int N) {
  const size_t Vl = static_cast<size_t>(layout_.local_vocab()), tp = static_cast<size_t>(tp_size_);
  const size_t n = static_cast<size_t>(N) * Vl;
  std::vector<float> mine(n), all(n * tp), full(n * tp);
  ops::to_host(mine.data(), local.f32(), n * sizeof(float));
  tp_->all_gather(comm::host_buffer(mine.data(), n, DType::kF32),
                  comm::host_buffer(all.data(), all.size(), DType::kF32));
  for (size_t r = 0; r < tp; ++r) {
    for (size_t row = 0; row < static_cast<size_t>(N); ++row) {
      std::copy_n(all.data() + r * n + row * Vl, Vl, full.data() + row * Vl * tp + r * Vl);
    }
  }
  Tensor out = alloc({N, static_cast<int64_t>(Vl * tp)}, "act.logits.gathered");
  ops::from_host(out.f32(), full.data(), full.size() * sizeof(float));
  return out;
}

void GptStage::take_local_columns(const Tensor& full, Tensor& local, int N) {
  const size_t Vl = static_cast<size_t>(layout_.local_vocab()), V = Vl * tp_size_;
  const size_t first = static_cast<size_t>(layout_.vocab_begin());
  std::vector<float> f(static_cast<size_t>(N) * V), l(static_cast<size_t>(N) * Vl);
  ops::to_host(f.data(), full.f32(), f.size() * sizeof(float));
  for (size_t row = 0; row < static_cast<size_t>(N); ++row) {
    std::copy_n(f.data() + row * V + first, Vl, l.data() + row * Vl);
  }
  ops::from_host(local.f32(), l.data(), l.size() * sizeof(float));
}

void GptStage::head_backward(StageActs& a, ParamAccess& pa, float dloss, Tensor& dx) {
  const int C = cfg_.d_model, N = a.B * a.T;
  const int V = static_cast<int>(layout_.vocab_rows()),
            Vl = static_cast<int>(layout_.local_vocab());
  const int hg = head_group();
  const GroupView h = group(pa, hg, true);
  Tensor dlogits = alloc({N, Vl}, "grad.act.logits");
  const float per_token = a.valid_targets ? dloss / static_cast<float>(a.valid_targets) : 0.0f;
  if (a.sharded_probs) {
    vocab_parallel_cross_entropy_backward(a, per_token, dlogits);
  } else if (vocab_split()) {
    Tensor full = alloc({N, V}, "grad.act.logits.gathered");
    ops::softmax_cross_entropy_backward(full.f32(), a.probs.f32(), a.targets_dev.data<int32_t>(),
                                        per_token, N, V);
    take_local_columns(full, dlogits, N);
  } else {
    ops::softmax_cross_entropy_backward(dlogits.f32(), a.probs.f32(), a.targets_dev.data<int32_t>(),
                                        per_token, N, V);
  }
  rnd(dlogits);
  Tensor dlnf = alloc({N, C}, "grad.act.lnf");
  {
    const GroupView hw = head_weight_group(pa, h, true);
    Tensor x = f32(a.lnf);
    linear_backward(hw, head_weight_name(), "", dlnf.f32(), dlogits.f32(), x.f32(), N, C, Vl);
  }
  release_head_weight(pa, true);
  // The column-parallel head's input gradient is a partial sum over the vocabulary slices.
  if (vocab_split()) tp_all_reduce(dlnf.f32(), static_cast<size_t>(N) * C);
  rnd(dlnf);
  {
    Tensor x = f32(a.layers.empty() ? a.input : a.layers.back().res3);
    OpParam g = param(h, "lnf.weight");
    OpGrad gg = grad(h, "lnf.weight"), gb = grad(h, "lnf.bias");
    ops::layernorm_backward(dx.f32(), gg.get(), gb.get(), dlnf.f32(), x.f32(), g.p,
                            a.lnf_mean.f32(), a.lnf_rstd.f32(), N, C);
  }
  rnd(dx);
  if (h.format == DType::kF32) {
    round_grads(static_cast<float*>(h.grads), "lm_head.", h.base);
    round_grads(static_cast<float*>(h.grads), "lnf.", h.base);
  }
  pa.release(hg, true);
  pa.grads_done(hg);
}

void GptStage::embed_backward(StageActs& a, ParamAccess& pa, Tensor& dx) {
  const int B = a.B, T = a.T, C = cfg_.d_model;
  // The embedding's backward reads no weights: its group's gradients only.
  GroupView e;
  e.format = pa.stored();
  e.grads = pa.grads_stored(0);
  {
    OpGrad dwte = grad(e, "wte"), dwpe = grad(e, "wpe");
    if (!vocab_split() || a.foreign.empty()) {
      ops::embedding_backward(dwte.get(), dwpe.get(), dx.f32(), a.tokens_dev.data<int32_t>(), B, T,
                              C);
    } else {
      // wpe takes every position's gradient; this rank's rows of wte only its own tokens'.
      ops::embedding_backward(nullptr, dwpe.get(), dx.f32(), a.tokens_dev.data<int32_t>(), B, T, C);
      Tensor mine = alloc({B * T, C}, "grad.act.embedding");
      ops::copy(mine.f32(), dx.f32(), dx.numel());
      for (int i : a.foreign) ops::zero(mine.f32() + static_cast<size_t>(i) * C, C * sizeof(float));
      ops::embedding_backward(dwte.get(), nullptr, mine.f32(), a.tokens_dev.data<int32_t>(), B, T,
                              C);
    }
  }
  if (e.format == DType::kF32) {
    round_grads(static_cast<float*>(e.grads), "wte", 0);
    round_grads(static_cast<float*>(e.grads), "wpe", 0);
  }
  pa.grads_done(0);
}

}  // namespace fl::model
