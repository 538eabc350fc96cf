#include "workloads/infer/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/counter_rng.hpp"
#include "base/ranks.hpp"
#include "injector/site.hpp"
#include "kernels/ops.hpp"

namespace fl::infer {

namespace {
using comm::host_buffer;

double uniform(uint64_t seed, int request, int64_t position) {
  return rng::to_unit(rng::mix(rng::mix(rng::mix(seed) ^ static_cast<uint64_t>(request)) ^
                               static_cast<uint64_t>(position)));
}
}  // namespace

int32_t sample_token(const float* logits, int V, const GenerateConfig& g, int request,
                     int64_t position) {
  if (g.top_k <= 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  const int k = std::min(g.top_k, V);
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    p[static_cast<size_t>(i)] =
        std::exp((logits[idx[static_cast<size_t>(i)]] - mx) / g.temperature);
    sum += p[static_cast<size_t>(i)];
  }
  double u = uniform(g.seed, request, position) * sum;
  for (int i = 0; i < k; ++i) {
    u -= p[static_cast<size_t>(i)];
    if (u <= 0) return idx[static_cast<size_t>(i)];
  }
  return idx[static_cast<size_t>(k - 1)];
}

InferenceEngine::InferenceEngine(const model::GptConfig& cfg, parallel::Topology& topo,
                                 std::vector<float> params, MemoryAccountant& acct)
    : cfg_(cfg),
      topo_(topo),
      layout_(cfg, topo.layout.tp, topo.tp_rank, topo.layout.pp, topo.pp_rank),
      params_(std::move(params)),
      acct_(acct) {
  if (params_.size() < layout_.total()) {
    raise<ConfigError>("inference shard has {} parameters, the layout needs {}", params_.size(),
                       layout_.total());
  }
}

void InferenceEngine::tp_all_reduce(float* x, size_t n) {
  if (topo_.layout.tp > 1) topo_.tp->all_reduce(host_buffer(x, n, DType::kF32));
}

std::vector<int32_t> InferenceEngine::step(const std::vector<int32_t>& tokens, int t, bool sample,
                                           const GenerateConfig& g, int64_t draw) {
  const int C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len, B = B_;
  const int tp = topo_.layout.tp, Cl = C / tp, NHl = cfg_.heads / tp, hs = C / cfg_.heads;
  float* P = params_.data();
  FAULTLINE_FAULT_POINT("infer.forward",
                        (fault::SiteContext{t, "", "infer.forward", -1, nullptr,
                                            static_cast<size_t>(B), DType::kI32, -1}));
  std::vector<float> x(static_cast<size_t>(B) * C);
  if (topo_.first_stage()) {
    const float* wte = layout_.find(P, "wte");
    const float* wpe = layout_.find(P, "wpe");
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c) {
        x[static_cast<size_t>(b) * C + c] =
            wte[static_cast<size_t>(tokens[static_cast<size_t>(b)]) * C + c] +
            wpe[static_cast<size_t>(t) * C + c];
      }
    }
  } else {
    topo_.pp->recv(host_buffer(x.data(), x.size(), DType::kF32), topo_.pp_rank - 1);
  }
  std::vector<float> ln(x.size()), mean(static_cast<size_t>(B)), rstd(static_cast<size_t>(B));
  std::vector<float> qkv(static_cast<size_t>(B) * 3 * Cl), atty(static_cast<size_t>(B) * Cl);
  std::vector<float> proj(x.size()), fch(static_cast<size_t>(B) * 4 * Cl), gel(fch.size());
  std::vector<float> scores(static_cast<size_t>(T));
  for (int li = 0; li < layout_.num_layers(); ++li) {
    auto w = layout_.block(P, layout_.first_layer() + li);
    ops::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.ln1_w, w.ln1_b, B, C);
    ops::linear_forward(qkv.data(), ln.data(), w.qkv_w, w.qkv_b, B, C, 3 * Cl);
    float* K = kcache_[static_cast<size_t>(li)].f32();
    float* Vc = vcache_[static_cast<size_t>(li)].f32();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NHl; ++h) {
        const float* q = qkv.data() + static_cast<size_t>(b) * 3 * Cl + h * hs;
        const size_t base = (static_cast<size_t>(b) * NHl + h) * T * hs;
        std::memcpy(K + base + static_cast<size_t>(t) * hs, q + Cl, hs * sizeof(float));
        std::memcpy(Vc + base + static_cast<size_t>(t) * hs, q + 2 * Cl, hs * sizeof(float));
        float mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          float d = 0;
          for (int i = 0; i < hs; ++i) d += q[i] * K[base + static_cast<size_t>(s) * hs + i];
          scores[static_cast<size_t>(s)] = d * scale;
          mx = std::max(mx, scores[static_cast<size_t>(s)]);
        }
        float sum = 0;
        for (int s = 0; s <= t; ++s) {
          scores[static_cast<size_t>(s)] = std::exp(scores[static_cast<size_t>(s)] - mx);
          sum += scores[static_cast<size_t>(s)];
        }
        float* y = atty.data() + static_cast<size_t>(b) * Cl + h * hs;
        std::fill(y, y + hs, 0.0f);
        for (int s = 0; s <= t; ++s) {
          const float a = scores[static_cast<size_t>(s)] / sum;
          for (int i = 0; i < hs; ++i) y[i] += a * Vc[base + static_cast<size_t>(s) * hs + i];
        }
      }
    }
    ops::linear_forward(proj.data(), atty.data(), w.proj_w, nullptr, B, Cl, C);
    tp_all_reduce(proj.data(), proj.size());
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c)
        x[static_cast<size_t>(b) * C + c] += proj[static_cast<size_t>(b) * C + c] + w.proj_b[c];
    }
    ops::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.ln2_w, w.ln2_b, B, C);
    ops::linear_forward(fch.data(), ln.data(), w.fc_w, w.fc_b, B, C, 4 * Cl);
    ops::gelu_forward(gel.data(), fch.data(), gel.size());
    ops::linear_forward(proj.data(), gel.data(), w.fcproj_w, nullptr, B, 4 * Cl, C);
    tp_all_reduce(proj.data(), proj.size());
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c)
        x[static_cast<size_t>(b) * C + c] += proj[static_cast<size_t>(b) * C + c] + w.fcproj_b[c];
    }
  }
  std::vector<int32_t> next(static_cast<size_t>(B), 0);
  if (!topo_.last_stage()) {
    topo_.pp->send(host_buffer(x.data(), x.size(), DType::kF32), topo_.pp_rank + 1);
  } else if (sample) {
    ops::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(),
                           layout_.find(P, "lnf.weight"), layout_.find(P, "lnf.bias"), B, C);
    std::vector<float> logits(static_cast<size_t>(B) * V);
    ops::linear_forward(logits.data(), ln.data(), layout_.find(P, "lm_head.weight"), nullptr, B, C,
                        V);
    for (int b = 0; b < B; ++b) {
      next[static_cast<size_t>(b)] =
          sample_token(logits.data() + static_cast<size_t>(b) * V, V, g, b, draw);
    }
  }
  // The last stage's choice reaches every stage (the first needs it as its next input).
  if (topo_.layout.pp > 1) {
    topo_.pp->broadcast(host_buffer(next.data(), next.size(), DType::kI32), topo_.layout.pp - 1);
  }
  return next;
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
  const int total = static_cast<int>(L) + g.max_new_tokens;
  if (total > cfg_.seq_len) {
    raise<ConfigError>("prompt of {} tokens + {} new tokens exceeds the model's context of {}", L,
                       g.max_new_tokens, cfg_.seq_len);
  }
  B_ = static_cast<int>(prompts.size());
  const int tp = topo_.layout.tp, NHl = cfg_.heads / tp, hs = cfg_.d_model / cfg_.heads;
  kcache_.clear();
  vcache_.clear();
  for (int li = 0; li < layout_.num_layers(); ++li) {
    const std::string n = "kv_cache.h" + std::to_string(layout_.first_layer() + li);
    kcache_.push_back(Tensor::zeros({B_, NHl, cfg_.seq_len, hs}, DType::kF32, n + ".k", acct_));
    vcache_.push_back(Tensor::zeros({B_, NHl, cfg_.seq_len, hs}, DType::kF32, n + ".v", acct_));
  }
  std::vector<std::vector<int32_t>> out = prompts;
  std::vector<int32_t> cur(static_cast<size_t>(B_));
  for (int t = 0; t < total - 1; ++t) {
    for (int b = 0; b < B_; ++b)
      cur[static_cast<size_t>(b)] = out[static_cast<size_t>(b)][static_cast<size_t>(t)];
    const bool generating = t + 1 >= static_cast<int>(L);
    // Step filters of fault plans count generated positions (negative while reading the prompt).
    fault::set_step(t + 1 - static_cast<int64_t>(L));
    const auto t0 = std::chrono::steady_clock::now();
    auto next = step(cur, t, generating, g, t + 1);
    if (generating) {
      for (int b = 0; b < B_; ++b)
        out[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
      if (sink_) {
        sink_(t + 1 - static_cast<int64_t>(L),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  kcache_.clear();
  vcache_.clear();
  return out;
}

void InferenceEngine::check_tp_agreement(const std::vector<std::vector<int32_t>>& out) {
  const int tp = topo_.layout.tp;
  if (out.empty()) return;
  const size_t total = out[0].size();
  if (tp > 1) {
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
              "[rank {}] tensor-parallel outputs diverge: request {} position {}: tp rank 0 "
              "produced token {}, tp rank {} produced token {}",
              topo_.rank, req, pos, all[i], r, all[static_cast<size_t>(r) * mine.size() + i]);
        }
      }
    }
  }
}

}  // namespace fl::infer
