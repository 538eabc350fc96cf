#include "workloads/model/params.hpp"

#include <algorithm>
#include <cmath>

#include "base/counter_rng.hpp"
#include "base/error.hpp"

namespace fl::model {

float counter_normal(uint64_t seed, const std::string& name, int64_t index) {
  uint64_t base = rng::mix(seed ^ rng::mix(rng::hash_name(name)));
  uint64_t a = rng::mix(base + 2 * static_cast<uint64_t>(index));
  uint64_t b = rng::mix(base + 2 * static_cast<uint64_t>(index) + 1);
  double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;  // (0, 1): log-safe
  double u2 = rng::to_unit(b);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

ParamLayout::ParamLayout(const GptConfig& cfg, int tp, int tp_rank, int pp, int stage)
    : cfg_(cfg), tp_(tp), tp_rank_(tp_rank), pp_(pp), stage_(stage) {
  const int64_t C = cfg.d_model, T = cfg.seq_len;
  num_layers_ = cfg.layers / pp;
  first_layer_ = stage * num_layers_;
  vocab_rows_ = padded_vocab(cfg, tp);
  local_vocab_ = vocab_rows_ / vocab_shards(cfg, tp);
  vocab_begin_ = cfg.structure.vocab_parallel ? tp_rank * local_vocab_ : 0;
  const Split vocab_split = cfg.structure.vocab_parallel ? Split::kRows : Split::kReplicated;
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  if (has_embedding()) {
    add("wte", vocab_rows_, C, vocab_split, Init::kNormal, 0.02f);
    add("wpe", T, C, Split::kReplicated, Init::kNormal, 0.01f);
    groups_.push_back({0, total_, -1});
  }
  for (int l = first_layer_; l < first_layer_ + num_layers_; ++l) {
    const size_t group_lo = total_;
    const std::string p = "h" + std::to_string(l) + ".";
    add(p + "ln1.weight", 1, C, Split::kReplicated, Init::kOnes, 0);
    add(p + "ln1.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
    add(p + "attn.qkv.weight", 3 * C, C, Split::kQkvRows, Init::kNormal, 0.02f);
    add(p + "attn.qkv.bias", 3 * C, 1, Split::kQkvRows, Init::kZeros, 0);
    add(p + "attn.proj.weight", C, C, Split::kCols, Init::kNormal, proj_std);
    add(p + "attn.proj.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
    add(p + "ln2.weight", 1, C, Split::kReplicated, Init::kOnes, 0);
    add(p + "ln2.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
    if (cfg.moe.is_moe_layer(l)) {
      // The router (DeepSpeed's gate.wg, no bias); the experts are in ParamLayout::experts.
      add(p + "moe.gate.weight", cfg.moe.experts, C, Split::kReplicated, Init::kNormal, 0.02f);
      groups_.push_back({group_lo, total_, l});
      continue;
    }
    add(p + "mlp.fc.weight", 4 * C, C, Split::kRows, Init::kNormal, 0.02f);
    add(p + "mlp.fc.bias", 4 * C, 1, Split::kRows, Init::kZeros, 0);
    add(p + "mlp.proj.weight", C, 4 * C, Split::kCols, Init::kNormal, proj_std);
    add(p + "mlp.proj.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
    groups_.push_back({group_lo, total_, l});
  }
  if (has_head()) add_head();
}

void ParamLayout::add_head() {
  const size_t group_lo = total_;
  const int64_t C = cfg_.d_model;
  const Split vocab_split = cfg_.structure.vocab_parallel ? Split::kRows : Split::kReplicated;
  add("lnf.weight", 1, C, Split::kReplicated, Init::kOnes, 0);
  add("lnf.bias", 1, C, Split::kReplicated, Init::kZeros, 0);
  if (!cfg_.structure.tie_embeddings) {
    add("lm_head.weight", vocab_rows_, C, vocab_split, Init::kNormal, 0.02f);
  } else if (has_embedding()) {
    head_weight_ = "wte";  // one tensor: the head reads the embedding's
  } else {
    // Megatron's word_embeddings_for_head: the last stage's copy of wte, kept equal to it by
    // summing the two gradients over the embedding group (first and last stage).
    add("lm_head.weight", vocab_rows_, C, vocab_split, Init::kNormal, 0.02f);
    specs_.back().init_name = "wte";
    specs_.back().shared = true;
  }
  groups_.push_back({group_lo, total_, -2});
}

void ParamLayout::add(std::string name, int64_t rows, int64_t cols, Split split, Init init,
                      float stddev) {
  ParamSpec s{std::move(name), rows, cols, split, init, stddev, rows, cols, total_, {}, false};
  if (split == Split::kRows || split == Split::kQkvRows) s.local_rows = rows / tp_;
  if (split == Split::kCols) s.local_cols = cols / tp_;
  total_ += s.numel();
  specs_.push_back(std::move(s));
}

const ParamSpec& ParamLayout::spec(const std::string& name) const {
  for (auto& s : specs_) {
    if (s.name == name) return s;
  }
  raise("no parameter named '{}' on this rank", name);
}

float* ParamLayout::find(float* flat, const std::string& name) const {
  return flat + spec(name).offset;
}

float* ParamLayout::find(float* data, const std::string& name, size_t base) const {
  const ParamSpec& s = spec(name);
  if (s.offset < base) raise("parameter '{}' lies before element {} of the buffer", name, base);
  return data + (s.offset - base);
}

int64_t ParamLayout::full_index(const ParamSpec& s, int64_t r, int64_t c) const {
  int64_t fr = r, fc = c;
  switch (s.split) {
    case Split::kReplicated:
      break;
    case Split::kRows:
      fr = tp_rank_ * s.local_rows + r;
      break;
    case Split::kCols:
      fc = tp_rank_ * s.local_cols + c;
      break;
    case Split::kQkvRows: {
      const int64_t part_rows = s.rows / 3;         // C
      const int64_t local_part = s.local_rows / 3;  // C / tp
      const int64_t part = r / local_part;
      fr = part * part_rows + tp_rank_ * local_part + r % local_part;
      break;
    }
  }
  return fr * s.cols + fc;
}

void ParamLayout::initialize(float* flat, uint64_t seed) const {
  initialize_range(flat, 0, total_, seed);
}

void ParamLayout::initialize_range(float* out, size_t lo, size_t hi, uint64_t seed) const {
  for (auto& s : specs_) {
    const size_t begin = std::max(lo, s.offset), end = std::min(hi, s.offset + s.numel());
    for (size_t i = begin; i < end; ++i) {
      const int64_t k = static_cast<int64_t>(i - s.offset);
      const int64_t r = k / s.local_cols, c = k % s.local_cols;
      float v = 0.0f;
      if (s.init == Init::kOnes) v = 1.0f;
      if (s.init == Init::kNormal) {
        const std::string& key = s.init_name.empty() ? s.name : s.init_name;
        v = s.stddev * counter_normal(seed, key, full_index(s, r, c));
      }
      out[i - lo] = v;
    }
  }
}

BlockParams ParamLayout::block(float* flat, int l) const {
  return block(flat, l, 0);
}

BlockParams ParamLayout::block(float* d, int l, size_t b) const {
  const std::string p = "h" + std::to_string(l) + ".";
  if (cfg_.moe.is_moe_layer(l)) {
    BlockParams w{find(d, p + "ln1.weight", b),
                  find(d, p + "ln1.bias", b),
                  find(d, p + "attn.qkv.weight", b),
                  find(d, p + "attn.qkv.bias", b),
                  find(d, p + "attn.proj.weight", b),
                  find(d, p + "attn.proj.bias", b),
                  find(d, p + "ln2.weight", b),
                  find(d, p + "ln2.bias", b),
                  nullptr,
                  nullptr,
                  nullptr,
                  nullptr};
    w.gate_w = find(d, p + "moe.gate.weight", b);
    return w;
  }
  return BlockParams{find(d, p + "ln1.weight", b),       find(d, p + "ln1.bias", b),
                     find(d, p + "attn.qkv.weight", b),  find(d, p + "attn.qkv.bias", b),
                     find(d, p + "attn.proj.weight", b), find(d, p + "attn.proj.bias", b),
                     find(d, p + "ln2.weight", b),       find(d, p + "ln2.bias", b),
                     find(d, p + "mlp.fc.weight", b),    find(d, p + "mlp.fc.bias", b),
                     find(d, p + "mlp.proj.weight", b),  find(d, p + "mlp.proj.bias", b)};
}

}  // namespace fl::model
