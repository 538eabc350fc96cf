// The single-rank GPT: gradients of the whole model against finite differences, deterministic
// layout-independent initialisation, layout validation messages, activation memory accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/ops.hpp"
#include "workloads/model/gpt.hpp"

namespace fl::model {
namespace {

GptConfig micro() {
  return GptConfig{11, 8, 2, 2, 5, 99};
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch batch(const GptConfig& c, int B, int T) {
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back((i * 7 + 3) % c.vocab);
    b.targets.push_back((i * 5 + 1) % c.vocab);
  }
  b.targets[2] = -1;  // an ignored position
  return b;
}

TEST(Gpt, GradientsMatchFiniteDifferences) {
  auto cfg = micro();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total()), grads(layout.total());
  layout.initialize(params.data(), cfg.seed);
  // Larger weights than the init, so every path carries signal worth checking.
  for (auto& p : params) p *= 5.0f;
  MemoryAccountant acct;
  GptStage stage(cfg, layout, nullptr, acct);
  const int B = 2, T = 4;
  auto data = batch(cfg, B, T);
  auto acts = stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), B, T);
  stage.backward(*acts, params.data(), grads.data(), 1.0f, nullptr, nullptr);
  auto loss = [&] {
    return static_cast<double>(
        stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), B, T)->loss);
  };
  // Every parameter tensor: its first elements and a middle one.
  int checked = 0;
  for (auto& s : layout.specs()) {
    for (size_t k : {size_t{0}, size_t{1}, s.numel() / 2}) {
      size_t i = s.offset + k;
      float keep = params[i];
      const float eps = 1e-3f;
      params[i] = keep + eps;
      double up = loss();
      params[i] = keep - eps;
      double down = loss();
      params[i] = keep;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[i], numeric, 3e-3 + 3e-2 * std::fabs(numeric)) << s.name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_NEAR(acts->loss, loss(), 1e-6);
}

TEST(Gpt, InitialLossIsLogVocab) {
  auto cfg = GptConfig::tiny();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total());
  layout.initialize(params.data(), cfg.seed);
  MemoryAccountant acct;
  GptStage stage(cfg, layout, nullptr, acct);
  auto data = batch(cfg, 2, cfg.seq_len);
  auto acts = stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), 2,
                            cfg.seq_len);
  EXPECT_NEAR(acts->loss, std::log(static_cast<float>(cfg.vocab)), 0.05);
}

TEST(Gpt, TensorParallelShardsAreSlicesOfTheFullWeights) {
  auto cfg = micro();
  ParamLayout full(cfg, 1, 0, 1, 0);
  std::vector<float> fp(full.total());
  full.initialize(fp.data(), cfg.seed);
  for (int r = 0; r < 2; ++r) {
    ParamLayout shard(cfg, 2, r, 1, 0);
    std::vector<float> sp(shard.total());
    shard.initialize(sp.data(), cfg.seed);
    for (auto& s : shard.specs()) {
      const auto& f = full.spec(s.name);
      for (int64_t i = 0; i < s.local_rows; ++i) {
        for (int64_t j = 0; j < s.local_cols; ++j) {
          ASSERT_EQ(sp[s.offset + i * s.local_cols + j], fp[f.offset + shard.full_index(s, i, j)])
              << s.name;
        }
      }
    }
  }
}

TEST(Gpt, ActivationsAreChargedToTheAccountantAndFreed) {
  auto cfg = GptConfig::tiny();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total());
  layout.initialize(params.data(), cfg.seed);
  MemoryAccountant acct(0, 0);
  GptStage stage(cfg, layout, nullptr, acct);
  auto data = batch(cfg, 4, cfg.seq_len);
  {
    auto acts = stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), 4,
                              cfg.seq_len);
    EXPECT_GT(acct.current(), 4u * cfg.seq_len * cfg.d_model * 4 * 10);
  }
  EXPECT_EQ(acct.current(), 0u);
  // A budget below one micro-batch's activations fails with the accountant's error.
  MemoryAccountant small(64 * 1024, 2);
  GptStage tight(cfg, layout, nullptr, small);
  EXPECT_THROW(tight.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), 4,
                             cfg.seq_len),
               OutOfMemoryError);
}

TEST(Layout, InvalidLayoutsNameTheSizes) {
  auto cfg = GptConfig::tiny();  // 4 heads, d_model 32, 2 layers
  auto msg = [&](Layout l) {
    try {
      validate(cfg, l);
      return std::string("ok");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(msg({8, 2, 2, 2, 0}), "ok");
  EXPECT_EQ(msg({4, 1, 3, 1, 0}),
            "invalid layout: dp 1 x tp 3 x pp 1 = 3 ranks, but the world has 4");
  EXPECT_EQ(msg({3, 1, 3, 1, 0}),
            "num_attention_heads (4) must be a multiple of tensor_model_parallel_size (3). "
            "(invalid layout: topology.tp allowed for 4 heads: 1, 2, 4)");
  EXPECT_EQ(msg({2, 1, 1, 2, 0}), "ok");
  EXPECT_EQ(msg({4, 1, 1, 4, 0}),
            "invalid layout: pipeline-parallel size 4 does not divide the 2 layers");
  // Model parallelism beyond the world is named as such, before the product.
  EXPECT_EQ(msg({2, 1, 8, 1, 0}),
            "invalid layout: model-parallel size (tp 8 x pp 1) is larger than the world size 2");
  EXPECT_EQ(msg({4, 1, 2, 1, 0}),
            "invalid layout: dp 1 x tp 2 x pp 1 = 2 ranks, but the world has 4");
  EXPECT_EQ(msg({1, 1, 1, 1, 2}),
            "invalid layout: ZeRO stage 2 partitions across data-parallel ranks, but dp is 1");
  EXPECT_EQ(msg({4, 2, 1, 2, 3}),
            "invalid layout: ZeRO stage 3 cannot be combined with pipeline parallelism (pp 2); "
            "use ZeRO-1 with pipelines");
  EXPECT_EQ(msg({2, 2, 1, 1, 4}), "invalid layout: ZeRO stage 4 does not exist (allowed 0-3)");
}

// Hands each group its own copy of the values and gradients and records the calls, as the ZeRO
// engine sees them.
class RecordingParams : public ParamAccess {
 public:
  RecordingParams(const ParamLayout& l, const std::vector<float>& flat) {
    for (auto& g : l.groups()) {
      values_.emplace_back(flat.begin() + static_cast<long>(g.lo),
                           flat.begin() + static_cast<long>(g.hi));
      grads_.emplace_back(g.numel(), 0.0f);
    }
    live_.assign(l.groups().size(), false);
  }
  const float* acquire(int g, bool backward) override {
    log.push_back((backward ? "B" : "F") + std::to_string(g));
    live_[static_cast<size_t>(g)] = true;
    return values_[static_cast<size_t>(g)].data();
  }
  void release(int g, bool) override { live_[static_cast<size_t>(g)] = false; }
  float* grads(int g) override { return grads_[static_cast<size_t>(g)].data(); }
  void grads_done(int g) override { log.push_back("G" + std::to_string(g)); }
  std::vector<float> flat_grads() const {
    std::vector<float> out;
    for (auto& g : grads_) out.insert(out.end(), g.begin(), g.end());
    return out;
  }
  bool any_live() const {
    for (bool b : live_) {
      if (b) return true;
    }
    return false;
  }
  std::vector<std::string> log;

 private:
  std::vector<std::vector<float>> values_, grads_;
  std::vector<bool> live_;
};

TEST(Gpt, ParameterGroupsAreUsedInOrderAndCheckpointingRecomputesTheSameGradients) {
  auto cfg = micro();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  ASSERT_EQ(layout.groups().size(), 4u);  // embedding, 2 blocks, head
  EXPECT_EQ(layout.groups().front().lo, 0u);
  EXPECT_EQ(layout.groups().back().hi, layout.total());
  std::vector<float> params(layout.total()), grads(layout.total());
  layout.initialize(params.data(), cfg.seed);
  MemoryAccountant acct;
  GptStage stage(cfg, layout, nullptr, acct);
  auto data = batch(cfg, 2, 4);
  auto acts = stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), 2, 4);
  stage.backward(*acts, params.data(), grads.data(), 1.0f, nullptr, nullptr);
  acts.reset();
  const size_t plain_peak = acct.peak();

  MemoryAccountant acct2;
  GptStage ckpt(cfg, layout, nullptr, acct2);
  ckpt.set_activation_checkpointing(true);
  RecordingParams rec(layout, params);
  auto a2 = ckpt.forward(rec, data.tokens.data(), nullptr, data.targets.data(), 2, 4);
  EXPECT_EQ(
      a2->loss,
      stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), 2, 4)->loss);
  ckpt.backward(*a2, rec, 1.0f, nullptr, nullptr);
  EXPECT_FALSE(rec.any_live());
  // Forward in flat order, backward in reverse; each group's gradients done right after its
  // backward (the embedding's backward reads no weights).
  const std::vector<std::string> want = {"F0", "F1", "F2", "F3", "B3", "G3",
                                         "B2", "G2", "B1", "G1", "G0"};
  EXPECT_EQ(rec.log, want);
  EXPECT_EQ(rec.flat_grads(), grads);  // recomputation is bit for bit
  EXPECT_LT(acct2.peak(), plain_peak);
}

// Runs one forward and backward of the micro model at `precision` with the embeddings scaled by
// `emb_scale`; returns the loss, and whether every gradient is finite.
struct PrecisionRun {
  float loss = 0;
  bool grads_finite = true;
  bool input_finite = true;
  bool stored_in_precision = true;  // every kept activation is a value of the format
};

// A tensor's values in fp32 (decoded from 16 bits).
std::vector<float> values(const Tensor& t) {
  std::vector<float> v(t.numel());
  convert_to_f32(t.raw(), t.dtype(), v.data(), v.size());
  return v;
}

PrecisionRun run_at(DType precision, float emb_scale) {
  auto cfg = micro();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total()), grads(layout.total(), 0.0f);
  layout.initialize(params.data(), cfg.seed);
  for (const char* name : {"wte", "wpe"}) {
    const auto& s = layout.spec(name);
    for (size_t i = 0; i < s.numel(); ++i) params[s.offset + i] *= emb_scale;
  }
  MemoryAccountant acct;
  GptStage stage(cfg, layout, nullptr, acct);
  stage.set_activation_precision(precision);
  const int B = 2, T = 4;
  auto data = batch(cfg, B, T);
  auto acts = stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), B, T);
  stage.backward(*acts, params.data(), grads.data(), 1024.0f, nullptr, nullptr);
  PrecisionRun r;
  r.loss = acts->loss;
  for (float g : grads) r.grads_finite = r.grads_finite && std::isfinite(g);
  // A kept activation: 16-bit under fp16/bf16 (2 bytes per element), fp32 otherwise.
  auto in_format = [&](const Tensor& t) {
    if (t.dtype() != precision) return false;
    for (float v : values(t)) {
      const float back = precision == DType::kF16    ? half_to_float(float_to_half(v))
                         : precision == DType::kBF16 ? bf16_to_float(float_to_bf16(v))
                                                     : v;
      if (std::isfinite(v) && back != v) return false;
    }
    return true;
  };
  for (float v : values(acts->input)) r.input_finite = r.input_finite && std::isfinite(v);
  r.stored_in_precision = in_format(acts->input) && in_format(acts->lnf);
  for (const auto& L : acts->layers) {
    for (const Tensor* t : {&L.ln1, &L.qkv, &L.att, &L.atty, &L.attproj, &L.res2, &L.ln2, &L.fch,
                            &L.fch_gelu, &L.fcproj, &L.res3}) {
      r.stored_in_precision = r.stored_in_precision && in_format(*t);
    }
  }
  return r;
}

TEST(GptPrecision, ActivationsAreComputedAndStoredInTheTrainingFormat) {
  const auto f32 = run_at(DType::kF32, 1.0f), f16 = run_at(DType::kF16, 1.0f),
             b16 = run_at(DType::kBF16, 1.0f);
  for (const auto* r : {&f32, &f16, &b16}) {
    EXPECT_TRUE(r->grads_finite);
    EXPECT_TRUE(r->stored_in_precision);
  }
  // Rounding every op output moves the loss a little, bf16 (8 mantissa bits) more than fp16.
  EXPECT_NE(f16.loss, f32.loss);
  EXPECT_NE(b16.loss, f32.loss);
  EXPECT_NEAR(f16.loss, f32.loss, 1e-3);
  EXPECT_NEAR(b16.loss, f32.loss, 2e-2);
}

TEST(GptPrecision, Fp16ActivationsOverflowWhereBf16KeepsTheRange) {
  // Embeddings scaled so some exceed fp16's largest value (65504): the forward overflows to inf
  // in fp16, layer norm turns it into NaN and so does the loss; bf16 and fp32 have the range.
  const float scale = 4e6f;  // init std 0.02 -> |values| well past 65504
  const auto f16 = run_at(DType::kF16, scale), b16 = run_at(DType::kBF16, scale),
             f32 = run_at(DType::kF32, scale);
  EXPECT_FALSE(f16.input_finite);
  EXPECT_TRUE(std::isnan(f16.loss)) << f16.loss;
  EXPECT_FALSE(f16.grads_finite);
  EXPECT_TRUE(b16.input_finite);
  EXPECT_TRUE(std::isfinite(b16.loss)) << b16.loss;
  EXPECT_TRUE(b16.grads_finite);
  EXPECT_TRUE(std::isfinite(f32.loss));
  EXPECT_TRUE(f32.grads_finite);
}

// The activations a forward keeps for the backward, in bytes: 16-bit ones at 2 bytes per element
// under fp16/bf16 (every op output), fp32 layer-norm statistics, softmax probabilities and losses,
// int32 token ids and targets.
size_t kept_activation_bytes(const GptConfig& c, const ParamLayout& l, int B, int T, size_t es) {
  const size_t N = static_cast<size_t>(B) * T, C = static_cast<size_t>(c.d_model);
  const size_t att = static_cast<size_t>(B) * c.heads * T * T;
  const size_t per_layer = (18 * N * C + att) * es + 4 * N * 4;
  const size_t head = N * C * es + 2 * N * 4 + N * static_cast<size_t>(l.local_vocab()) * 4 + N * 4;
  return N * C * es + c.layers * per_layer + head + 2 * N * 4;
}

TEST(GptPrecision, SixteenBitActivationsAreKeptAndCountedInTwoBytes) {
  auto cfg = micro();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total());
  layout.initialize(params.data(), cfg.seed);
  const int B = 2, T = 4;
  auto data = batch(cfg, B, T);
  for (DType precision : {DType::kF32, DType::kF16, DType::kBF16}) {
    MemoryAccountant acct;
    GptStage stage(cfg, layout, nullptr, acct);
    stage.set_activation_precision(precision);
    auto acts =
        stage.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), B, T);
    EXPECT_EQ(acct.current(MemCategory::kActivations),
              kept_activation_bytes(cfg, layout, B, T, dtype_size(precision)))
        << dtype_name(precision);
    EXPECT_EQ(acts->layers[0].fch.bytes(),
              static_cast<size_t>(B) * T * 4 * cfg.d_model * dtype_size(precision));
    // The fp32 scratch the ops computed in is gone once the forward returns.
    EXPECT_EQ(acct.current(MemCategory::kBuffers), 0u) << dtype_name(precision);
  }
}

// A ZeRO engine's view under bf16: every group's values and gradients held in 16 bits.
class Bf16Params : public ParamAccess {
 public:
  Bf16Params(const ParamLayout& l, const std::vector<float>& flat) : layout_(l) {
    for (auto& g : l.groups()) {
      values_.emplace_back(g.numel());
      grads_.emplace_back(g.numel(), 0);
      convert_from_f32(flat.data() + g.lo, values_.back().data(), DType::kBF16, g.numel());
    }
  }
  DType stored() const override { return DType::kBF16; }
  const void* acquire_stored(int g, bool) override {
    return values_[static_cast<size_t>(g)].data();
  }
  void* grads_stored(int g) override { return grads_[static_cast<size_t>(g)].data(); }
  const float* acquire(int, bool) override {
    ADD_FAILURE() << "a 16-bit group was asked for in fp32 as a whole";
    return nullptr;
  }
  float* grads(int) override {
    ADD_FAILURE() << "a 16-bit group's gradients were asked for in fp32 as a whole";
    return nullptr;
  }
  std::vector<float> flat_grads() const {
    std::vector<float> out(layout_.total());
    for (size_t g = 0; g < grads_.size(); ++g) {
      convert_to_f32(grads_[g].data(), DType::kBF16, out.data() + layout_.groups()[g].lo,
                     grads_[g].size());
    }
    return out;
  }

 private:
  const ParamLayout& layout_;
  std::vector<std::vector<uint16_t>> values_, grads_;
};

// A 16-bit group is read one op's parameters at a time (fp32 scratch of one weight, never a whole
// block decoded) and its gradients accumulated one op at a time, with the results of fp32 groups
// holding the same 16-bit values: the loss and every gradient bit for bit.
TEST(GptPrecision, SixteenBitGroupsAreDecodedOneOpAtATimeWithTheSameResults) {
  auto cfg = micro();
  ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> params(layout.total()), grads(layout.total(), 0.0f);
  layout.initialize(params.data(), cfg.seed);
  ops::round_to_precision(params.data(), params.size(), DType::kBF16);
  const int B = 2, T = 4;
  auto data = batch(cfg, B, T);
  MemoryAccountant flat_acct, acct;
  GptStage flat(cfg, layout, nullptr, flat_acct), stage(cfg, layout, nullptr, acct);
  flat.set_activation_precision(DType::kBF16);
  stage.set_activation_precision(DType::kBF16);
  auto fa = flat.forward(params.data(), data.tokens.data(), nullptr, data.targets.data(), B, T);
  flat.backward(*fa, params.data(), grads.data(), 1024.0f, nullptr, nullptr);
  Bf16Params p16(layout, params);
  auto a = stage.forward(p16, data.tokens.data(), nullptr, data.targets.data(), B, T);
  stage.backward(*a, p16, 1024.0f, nullptr, nullptr);
  EXPECT_EQ(a->loss, fa->loss);
  EXPECT_EQ(p16.flat_grads(), grads);
  // The largest parameter is the MLP's 4C x C; a block holds 12C² + 13C.
  const size_t C = static_cast<size_t>(cfg.d_model), block = 12 * C * C + 13 * C;
  EXPECT_LT(acct.peak(MemCategory::kBuffers), 4 * block);
  EXPECT_GE(acct.peak(MemCategory::kBuffers), 4 * 4 * C * C);
}

}  // namespace
}  // namespace fl::model
