// The GPT's two ends, where the vocabulary is: the embedding (wte + wpe) and the head (final layer
// norm, LM head, cross entropy). Replicated, or vocab-parallel as Megatron's VocabParallelEmbedding
// and column-parallel head with a vocab-parallel cross entropy or all-gathered logits; under tied
// embeddings the head reads wte (docs/workloads.md#structure).
#include <algorithm>
#include <cmath>

#include "kernels/ops.hpp"
#include "workloads/model/gpt.hpp"

namespace fl::model {

void GptStage::embed_forward(StageActs& a, ParamAccess& pa, const int32_t* tokens) {
  const int B = a.B, T = a.T, C = cfg_.d_model, N = B * T;
  const int64_t V = layout_.vocab_rows(), lo = layout_.vocab_begin(), n = layout_.local_vocab();
  a.tokens.assign(tokens, tokens + N);
  std::vector<int32_t> local(a.tokens);
  for (int i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
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
  auto* P = const_cast<float*>(pa.acquire(0, false));
  ops::embedding_forward(a.input.f32(), a.tokens_dev.data<int32_t>(), layout_.find(P, "wte", 0),
                         layout_.find(P, "wpe", 0), B, T, C);
  pa.release(0, false);
  if (vocab_split()) {
    // The owner's row carries wte + wpe, the others zero: the sum over TP is the embedding.
    for (int i : a.foreign)
      ops::zero(a.input.f32() + static_cast<size_t>(i) * C, C * sizeof(float));
    tp_all_reduce(a.input.f32(), static_cast<size_t>(N) * C);
  }
  rnd(a.input);
}

const float* GptStage::head_weight(ParamAccess& pa, const float* head_params, bool backward) {
  if (layout_.head_reads_embedding())
    return layout_.find(const_cast<float*>(pa.acquire(0, backward)), "wte", 0);
  const size_t base = layout_.groups()[static_cast<size_t>(head_group())].lo;
  return layout_.find(const_cast<float*>(head_params), layout_.head_weight(), base);
}

float* GptStage::head_weight_grad(ParamAccess& pa, float* head_grads) {
  if (layout_.head_reads_embedding()) return layout_.find(pa.grads(0), "wte", 0);
  const size_t base = layout_.groups()[static_cast<size_t>(head_group())].lo;
  return layout_.find(head_grads, layout_.head_weight(), base);
}

void GptStage::release_head_weight(ParamAccess& pa, bool backward) {
  if (layout_.head_reads_embedding()) pa.release(0, backward);
}

void GptStage::head_forward(StageActs& a, ParamAccess& pa, const float* x, const int32_t* targets) {
  const int C = cfg_.d_model, N = a.B * a.T;
  const int V = static_cast<int>(layout_.vocab_rows()),
            Vl = static_cast<int>(layout_.local_vocab());
  a.targets.assign(targets, targets + N);
  a.targets_dev = upload(targets, N, "act.targets");
  a.lnf = alloc({N, C}, "act.lnf");
  a.lnf_mean = alloc({N}, "act.lnf.mean");
  a.lnf_rstd = alloc({N}, "act.lnf.rstd");
  const size_t base = layout_.groups()[static_cast<size_t>(head_group())].lo;
  auto* P = const_cast<float*>(pa.acquire(head_group(), false));
  ops::layernorm_forward(a.lnf.f32(), a.lnf_mean.f32(), a.lnf_rstd.f32(), x,
                         layout_.find(P, "lnf.weight", base), layout_.find(P, "lnf.bias", base), N,
                         C);
  rnd(a.lnf);
  a.probs = alloc({N, Vl}, "act.logits");
  ops::linear_forward(a.probs.f32(), a.lnf.f32(), head_weight(pa, P, false), nullptr, N, C, Vl);
  rnd(a.probs);  // the logits, in the activation format; softmax and loss run in fp32
  release_head_weight(pa, false);
  pa.release(head_group(), false);
  a.losses = alloc({N}, "act.losses");
  if (vocab_split() && cfg_.structure.parallel_output) {
    a.sharded_probs = true;
    vocab_parallel_cross_entropy(a);
  } else {
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
  const size_t base = layout_.groups()[static_cast<size_t>(hg)].lo;
  auto* P = const_cast<float*>(pa.acquire(hg, true));
  float* grads = pa.grads(hg);
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
  ops::linear_backward(dlnf.f32(), head_weight_grad(pa, grads), nullptr, dlogits.f32(), a.lnf.f32(),
                       head_weight(pa, P, true), N, C, Vl);
  release_head_weight(pa, true);
  // The column-parallel head's input gradient is a partial sum over the vocabulary slices.
  if (vocab_split()) tp_all_reduce(dlnf.f32(), static_cast<size_t>(N) * C);
  rnd(dlnf);
  const float* x_last = a.output();
  ops::layernorm_backward(dx.f32(), layout_.find(grads, "lnf.weight", base),
                          layout_.find(grads, "lnf.bias", base), dlnf.f32(), x_last,
                          layout_.find(P, "lnf.weight", base), a.lnf_mean.f32(), a.lnf_rstd.f32(),
                          N, C);
  rnd(dx);
  round_grads(grads, "lm_head.", base);
  round_grads(grads, "lnf.", base);
  pa.release(hg, true);
  pa.grads_done(hg);
}

void GptStage::embed_backward(StageActs& a, ParamAccess& pa, Tensor& dx) {
  const int B = a.B, T = a.T, C = cfg_.d_model;
  float* grads = pa.grads(0);
  float* dwte = layout_.find(grads, "wte", 0);
  float* dwpe = layout_.find(grads, "wpe", 0);
  if (!vocab_split() || a.foreign.empty()) {
    ops::embedding_backward(dwte, dwpe, dx.f32(), a.tokens_dev.data<int32_t>(), B, T, C);
  } else {
    // wpe takes every position's gradient; this rank's rows of wte only its own tokens'.
    ops::embedding_backward(nullptr, dwpe, dx.f32(), a.tokens_dev.data<int32_t>(), B, T, C);
    Tensor mine = alloc({B * T, C}, "grad.act.embedding");
    ops::copy(mine.f32(), dx.f32(), dx.numel());
    for (int i : a.foreign) ops::zero(mine.f32() + static_cast<size_t>(i) * C, C * sizeof(float));
    ops::embedding_backward(dwte, nullptr, mine.f32(), a.tokens_dev.data<int32_t>(), B, T, C);
  }
  round_grads(grads, "wte", 0);
  round_grads(grads, "wpe", 0);
  pa.grads_done(0);
}

}  // namespace fl::model
