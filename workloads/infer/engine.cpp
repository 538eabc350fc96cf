#include "workloads/infer/engine.hpp"
#include "workloads/comm/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "base/counter_rng.hpp"
#include "base/ranks.hpp"
#include "injector/site.hpp"
#include "kernels/ops.hpp"

namespace fl::infer {

namespace {
using comm::device_buffer;
using comm::host_buffer;
}  // namespace

CacheReset parse_cache_reset(const std::string& word, const char* option) {
  if (word == "generate") return CacheReset::kGenerate;
  if (word == "prompt") return CacheReset::kPrompt;
  if (word == "never") return CacheReset::kNever;
  raise<ConfigError>("{} {} is not a cache reset policy (allowed: generate, prompt, never)", option,
                     word);
}

double sampling_uniform(uint64_t seed, int64_t call, int request, int64_t position) {
  uint64_t x = rng::mix(rng::mix(seed) ^ static_cast<uint64_t>(call));
  x = rng::mix(x ^ static_cast<uint64_t>(request));
  return rng::to_unit(rng::mix(x ^ static_cast<uint64_t>(position)));
}

int32_t sample_token(const float* logits, int V, const GenerateConfig& g, double u) {
  if (!g.sampling()) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  const int k = g.top_k > 0 ? std::min(g.top_k, V) : V;
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = std::exp((logits[idx[i]] - mx) / g.temperature);
    sum += p[i];
  }
  // top-p: keep the most likely tokens until their share reaches top_p (the one that crosses it
  // included, as HF's TopPLogitsWarper keeps it).
  size_t keep = p.size();
  if (g.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      cum += p[i] / sum;
      if (cum >= g.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  double x = u * kept;
  for (size_t i = 0; i < keep; ++i) {
    x -= p[i];
    if (x < 0) return idx[i];
  }
  return idx[keep - 1];
}

InferenceEngine::InferenceEngine(const model::GptConfig& cfg, parallel::Topology& topo,
                                 std::vector<float> params, MemoryAccountant& acct)
    : cfg_(cfg),
      topo_(topo),
      layout_(cfg, topo.layout.tp, topo.tp_rank, topo.layout.pp, topo.pp_rank),
      acct_(acct),
      staging_(0, acct.rank(), acct.device()) {
  if (params.size() < layout_.total()) {
    raise<ConfigError>("inference shard has {} parameters, the layout needs {}", params.size(),
                       layout_.total());
  }
  params_ =
      Tensor::zeros({static_cast<int64_t>(params.size())}, DType::kF32, "infer.params", staging_);
  ops::from_host(params_.raw(), params.data(), params.size() * sizeof(float));
}

void InferenceEngine::tp_all_reduce(float* x, size_t n) {
  if (topo_.layout.tp > 1) topo_.tp->all_reduce(device_buffer(x, n, DType::kF32));
}

// The position id indexes the learned position embedding (T rows), and the cache slot: past the
// context, PyTorch's embedding lookup fails in its own words (a later stage, which has no
// embedding, would write past its cache: it stops at the same check).
void InferenceEngine::check_position(int t) const {
  if (t >= cfg_.seq_len) {
    raise<Error>(
        "[rank {}] IndexError: index out of range in self (position id {}; the position "
        "embedding wpe has {} rows)",
        topo_.rank, t, cfg_.seq_len);
  }
}

std::vector<int32_t> InferenceEngine::step(const std::vector<int32_t>& tokens, int t, bool choose,
                                           const GenerateConfig& g, int64_t draw) {
  const int C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len, B = B_;
  const int tp = topo_.layout.tp, Cl = C / tp, NHl = cfg_.heads / tp, hs = C / cfg_.heads;
  float* P = params_.f32();
  FAULTLINE_FAULT_POINT("infer.forward",
                        (fault::SiteContext{t, "", "infer.forward", -1, nullptr,
                                            static_cast<size_t>(B), DType::kI32, -1}));
  auto buf = [&](size_t n, const char* what) {
    return Tensor::zeros({static_cast<int64_t>(n)}, DType::kF32, what, staging_);
  };
  Tensor x = buf(static_cast<size_t>(B) * C, "infer.x");
  if (topo_.first_stage()) {
    check_position(t);
    Tensor tok = Tensor::zeros({B}, DType::kI32, "infer.tokens", staging_);
    ops::from_host(tok.raw(), tokens.data(), static_cast<size_t>(B) * sizeof(int32_t));
    // Position t of every sequence: the embedding of a length-1 sequence whose positions start
    // at row t of wpe.
    ops::embedding_forward(x.f32(), tok.data<int32_t>(), layout_.find(P, "wte"),
                           layout_.find(P, "wpe") + static_cast<size_t>(t) * C, B, 1, C);
  } else {
    topo_.pp->recv(device_buffer(x.f32(), x.numel(), DType::kF32), topo_.pp_rank - 1);
    check_position(t);
  }
  Tensor ln = buf(x.numel(), "infer.ln"), mean = buf(static_cast<size_t>(B), "infer.ln.mean"),
         rstd = buf(static_cast<size_t>(B), "infer.ln.rstd");
  Tensor qkv = buf(static_cast<size_t>(B) * 3 * Cl, "infer.qkv"),
         atty = buf(static_cast<size_t>(B) * Cl, "infer.atty");
  Tensor proj = buf(x.numel(), "infer.proj"),
         fch = buf(static_cast<size_t>(B) * 4 * Cl, "infer.fch"),
         gel = buf(static_cast<size_t>(B) * 4 * Cl, "infer.gelu");
  const size_t n = x.numel();
  for (int li = 0; li < layout_.num_layers(); ++li) {
    auto w = layout_.block(P, layout_.first_layer() + li);
    ops::layernorm_forward(ln.f32(), mean.f32(), rstd.f32(), x.f32(), w.ln1_w, w.ln1_b, B, C);
    ops::linear_forward(qkv.f32(), ln.f32(), w.qkv_w, w.qkv_b, B, C, 3 * Cl);
    ops::kv_decode_attention(atty.f32(), kcache_[static_cast<size_t>(li)].f32(),
                             vcache_[static_cast<size_t>(li)].f32(), qkv.f32(), B, NHl, T, hs, t,
                             window_);
    ops::linear_forward(proj.f32(), atty.f32(), w.proj_w, nullptr, B, Cl, C);
    tp_all_reduce(proj.f32(), n);
    // x += proj + bias, in that order of additions
    ops::add_bias(proj.f32(), w.proj_b, B, C);
    ops::residual_forward(x.f32(), x.f32(), proj.f32(), n);
    ops::layernorm_forward(ln.f32(), mean.f32(), rstd.f32(), x.f32(), w.ln2_w, w.ln2_b, B, C);
    ops::linear_forward(fch.f32(), ln.f32(), w.fc_w, w.fc_b, B, C, 4 * Cl);
    ops::gelu_forward(gel.f32(), fch.f32(), gel.numel());
    ops::linear_forward(proj.f32(), gel.f32(), w.fcproj_w, nullptr, B, 4 * Cl, C);
    tp_all_reduce(proj.f32(), n);
    ops::add_bias(proj.f32(), w.fcproj_b, B, C);
    ops::residual_forward(x.f32(), x.f32(), proj.f32(), n);
  }
  std::vector<int32_t> next(static_cast<size_t>(B), 0);
  if (!topo_.last_stage()) {
    topo_.pp->send(device_buffer(x.f32(), x.numel(), DType::kF32), topo_.pp_rank + 1);
  } else if (choose) {
    ops::layernorm_forward(ln.f32(), mean.f32(), rstd.f32(), x.f32(), layout_.find(P, "lnf.weight"),
                           layout_.find(P, "lnf.bias"), B, C);
    Tensor dlogits = buf(static_cast<size_t>(B) * V, "infer.logits");
    ops::linear_forward(dlogits.f32(), ln.f32(), layout_.find(P, "lm_head.weight"), nullptr, B, C,
                        V);
    // Sampling runs on the host: one copy of the batch's logits per position.
    std::vector<float> logits(dlogits.numel());
    ops::to_host(logits.data(), dlogits.f32(), logits.size() * sizeof(float));
    for (int b = 0; b < B; ++b) {
      const double u = g.sampling() ? sampling_uniform(g.seed, calls_, b, draw) : 0.0;
      next[static_cast<size_t>(b)] =
          sample_token(logits.data() + static_cast<size_t>(b) * V, V, g, u);
    }
  }
  // The last stage's choice reaches every stage (the first needs it as its next input).
  if (topo_.layout.pp > 1) {
    topo_.pp->broadcast(host_buffer(next.data(), next.size(), DType::kI32), topo_.layout.pp - 1);
  }
  return next;
}

void InferenceEngine::ensure_cache(int B) {
  if (B == B_ && !kcache_.empty()) return;
  if (pos_ > 0) {
    // A batch of another size cannot continue this cache (PyTorch's words for the concatenation
    // of the cached keys with the new ones).
    raise<Error>(
        "[rank {}] RuntimeError: Sizes of tensors must match except in dimension 2. Expected "
        "size {} but got size {} for tensor number 1 in the list (the KV cache holds {} "
        "positions of {} requests)",
        topo_.rank, B_, B, pos_, B_);
  }
  B_ = B;
  const int tp = topo_.layout.tp, NHl = cfg_.heads / tp, hs = cfg_.d_model / cfg_.heads;
  kcache_.clear();
  vcache_.clear();
  for (int li = 0; li < layout_.num_layers(); ++li) {
    const std::string n = "kv_cache.h" + std::to_string(layout_.first_layer() + li);
    kcache_.push_back(Tensor::zeros({B_, NHl, cfg_.seq_len, hs}, DType::kF32, n + ".k", acct_));
    vcache_.push_back(Tensor::zeros({B_, NHl, cfg_.seq_len, hs}, DType::kF32, n + ".v", acct_));
  }
}

void InferenceEngine::reset_call() {
  // The engine's reset_cache() call is a fault site (seq: the generate() call), so a plan can
  // skip it on some ranks or calls: skip → this rank's cache continues the previous call.
  const auto v = FAULTLINE_FAULT_POINT(
      "infer.reset_cache",
      (fault::SiteContext{calls_, "", "infer.reset_cache", -1, nullptr, 0, DType::kI32, -1}));
  if (v != fault::Verdict::kSkip) reset_cache();
}

void InferenceEngine::begin_forward(int n) {
  if (reset_ == CacheReset::kPrompt && n > 1) reset_call();
}

std::vector<std::vector<int32_t>> InferenceEngine::generate(
    const std::vector<std::vector<int32_t>>& prompts, const GenerateConfig& g) {
  if (prompts.empty()) return {};
  const size_t L = prompts[0].size();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].size() != L || L == 0) {
      raise<ConfigError>(
          "request {} has a prompt of {} tokens; every request in a batch needs "
          "the same non-zero length ({})",
          i, prompts[i].size(), L);
    }
  }
  int total = static_cast<int>(L) + g.max_new_tokens;
  if (total > cfg_.seq_len && g.context_limit != "clamp" && g.context_limit != "none") {
    raise<ConfigError>("prompt of {} tokens + {} new tokens exceeds the model's context of {}", L,
                       g.max_new_tokens, cfg_.seq_len);
  }
  if (total > cfg_.seq_len && g.context_limit == "clamp") {
    std::fprintf(stderr,
                 "[rank %d] warning: a prompt of %zu tokens + max_new_tokens %d exceeds the "
                 "model's context of %d: generating %d new tokens, up to the context\n",
                 topo_.rank, L, g.max_new_tokens, cfg_.seq_len, cfg_.seq_len - static_cast<int>(L));
    total = cfg_.seq_len;
  }
  if (g.eos >= cfg_.vocab || g.eos < -1) {
    raise<ConfigError>("--eos {} is not a token of the vocabulary (allowed: -1 or 0-{})", g.eos,
                       cfg_.vocab - 1);
  }
  if (g.sampling() && !(g.temperature > 0)) {
    raise<ConfigError>("--temperature {} cannot scale logits for sampling (allowed: above 0)",
                       g.temperature);
  }
  if (reset_ == CacheReset::kGenerate) reset_call();
  ensure_cache(static_cast<int>(prompts.size()));
  std::vector<std::vector<int32_t>> out = prompts;
  std::vector<int32_t> cur(static_cast<size_t>(B_));
  std::vector<bool> done(static_cast<size_t>(B_), false);
  const int64_t base = generated_;
  // The prompt is one forward call of L tokens, then each new token one call of its own.
  begin_forward(static_cast<int>(L));
  for (int t = 0; t < total - 1; ++t) {
    if (t >= static_cast<int>(L)) begin_forward(1);
    for (int b = 0; b < B_; ++b)
      cur[static_cast<size_t>(b)] = out[static_cast<size_t>(b)][static_cast<size_t>(t)];
    const bool generating = t + 1 >= static_cast<int>(L);
    const int64_t pos = t + 1 - static_cast<int64_t>(L);  // of the token chosen here
    // Step filters of fault plans count generated positions over all calls (negative while
    // reading the first call's prompt, the last generated one while reading a later prompt).
    fault::set_step(generating ? base + pos : (base > 0 ? base - 1 : pos));
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t comm0 = comm::time_in_comm_ns();
    const int64_t ops0 = comm::comm_ops_ended();
    auto next = step(cur, pos_, generating, g, t + 1);
    ++pos_;
    if (!generating) continue;
    bool all_done = true;
    for (int b = 0; b < B_; ++b) {
      const size_t i = static_cast<size_t>(b);
      const int32_t tok = done[i] ? g.eos : next[i];
      out[i].push_back(tok);
      done[i] = done[i] || (g.eos >= 0 && tok == g.eos);
      all_done = all_done && done[i];
    }
    ++generated_;
    if (sink_) {
      sink_(base + pos,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            static_cast<double>(comm::time_in_comm_ns() - comm0) * 1e-9,
            comm::comm_op_seconds_since(ops0));
    }
    // Every request has ended (HF's unfinished_sequences all zero): stop this call here.
    if (all_done) break;
  }
  ++calls_;
  return out;
}

void InferenceEngine::check_tp_agreement(const std::vector<std::vector<int32_t>>& out, int call) {
  const int tp = topo_.layout.tp;
  if (out.empty()) return;
  const size_t total = out[0].size();
  if (tp > 1) {
    // Lengths first (requests that ended at eos make a call shorter), so that the token gather
    // below has the same count on every rank.
    int32_t len = static_cast<int32_t>(total);
    std::vector<int32_t> lens(static_cast<size_t>(tp));
    topo_.tp->all_gather(host_buffer(&len, 1, DType::kI32),
                         host_buffer(lens.data(), lens.size(), DType::kI32));
    for (int r = 1; r < tp; ++r) {
      if (lens[static_cast<size_t>(r)] != lens[0]) {
        raise<OutputMismatchError>(
            "[rank {}] tensor-parallel outputs diverge: call {}: tp rank 0 produced {} "
            "positions per request, tp rank {} produced {}",
            topo_.rank, call, lens[0], r, lens[static_cast<size_t>(r)]);
      }
    }
    std::vector<int32_t> mine;
    for (auto& o : out) mine.insert(mine.end(), o.begin(), o.end());
    std::vector<int32_t> all(mine.size() * static_cast<size_t>(tp));
    topo_.tp->all_gather(host_buffer(mine.data(), mine.size(), DType::kI32),
                         host_buffer(all.data(), all.size(), DType::kI32));
    for (int r = 1; r < tp; ++r) {
      for (size_t i = 0; i < mine.size(); ++i) {
        if (all[static_cast<size_t>(r) * mine.size() + i] != all[i]) {
          const size_t req = i / total, pos = i % total;
          raise<OutputMismatchError>(
              "[rank {}] tensor-parallel outputs diverge: request {} position {} (call {}): tp "
              "rank 0 produced token {}, tp rank {} produced token {}",
              topo_.rank, req, pos, call, all[i], r, all[static_cast<size_t>(r) * mine.size() + i]);
        }
      }
    }
  }
}

}  // namespace fl::infer
