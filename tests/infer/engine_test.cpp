// The inference engine's mechanics on one rank: a KV cache emptied at every generate() call or
// kept (and what a kept one does to the next call), the one-token prompt under DeepSpeed's old
// prompt heuristic, greedy and sampled decoding (temperature, top-k, top-p) with a seeded
// generator, and eos. Agreement across tensor-parallel ranks is in infer_test.cpp (mpirun).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "injector/plan.hpp"
#include "workloads/infer/engine.hpp"

namespace fl::infer {
namespace {

using Batch = std::vector<std::vector<int32_t>>;

// A model whose attention matters: weights five times the initialisation's, so what the cache
// holds changes the next token.
std::vector<float> weights(const model::GptConfig& cfg) {
  model::ParamLayout layout(cfg, 1, 0, 1, 0);
  std::vector<float> p(layout.total());
  layout.initialize(p.data(), cfg.seed);
  for (auto& x : p) x *= 5.0f;
  return p;
}

// One rank, no tensor or pipeline parallelism: the engine needs no communicator.
struct Server {
  model::GptConfig cfg = model::GptConfig::tiny();
  parallel::Topology topo;
  MemoryAccountant acct;
  InferenceEngine engine{cfg, topo, weights(cfg), acct};
  explicit Server(CacheReset r = CacheReset::kGenerate) { engine.set_cache_reset(r); }
};

Batch prompts(int requests, int len, int first = 0) {
  Batch b;
  for (int r = 0; r < requests; ++r) {
    auto& p = b.emplace_back();
    for (int i = 0; i < len; ++i) p.push_back(((first + r) * 13 + i * 7 + 5) % 64);
  }
  return b;
}

GenerateConfig greedy(int new_tokens) {
  GenerateConfig g;
  g.max_new_tokens = new_tokens;
  return g;
}

TEST(InferenceEngine, EveryGenerateCallStartsWithAnEmptyCacheByDefault) {
  Server s;
  const auto first = s.engine.generate(prompts(2, 4), greedy(6));
  EXPECT_EQ(s.engine.cached_positions(), 9);  // 4 prompt + 6 new - 1 (the last is not fed back)
  s.engine.generate(prompts(2, 4, 5), greedy(6));
  const auto again = s.engine.generate(prompts(2, 4), greedy(6));
  EXPECT_EQ(again, first);
  EXPECT_EQ(s.engine.cached_positions(), 9);
}

TEST(InferenceEngine, AKeptCacheChangesTheNextCallsTokens) {
  Server fresh, kept(CacheReset::kNever);
  const auto a = kept.engine.generate(prompts(2, 2), greedy(3));
  EXPECT_EQ(a, fresh.engine.generate(prompts(2, 2), greedy(3)));
  // The second call starts at position 4 and attends to the first call's keys.
  const auto b = kept.engine.generate(prompts(2, 2, 3), greedy(3));
  EXPECT_EQ(kept.engine.cached_positions(), 8);
  EXPECT_NE(b, fresh.engine.generate(prompts(2, 2, 3), greedy(3)));
  // Emptied by hand (DeepSpeed's reset_cache()), the same call gives the fresh tokens.
  kept.engine.reset_cache();
  EXPECT_EQ(kept.engine.generate(prompts(2, 2, 3), greedy(3)),
            fresh.engine.generate(prompts(2, 2, 3), greedy(3)));
}

TEST(InferenceEngine, AKeptCacheRunsPastTheContextWithPyTorchsIndexError) {
  Server kept(CacheReset::kNever);
  kept.engine.generate(prompts(1, 4), greedy(8));  // positions 0..10 of 16
  try {
    kept.engine.generate(prompts(1, 4), greedy(8));
    FAIL() << "the second call ran past the context";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 0] IndexError: index out of range in self (position id 16; the position "
                 "embedding wpe has 16 rows)");
  }
}

// Stop 56: a request past the context. refuse (the default, and any word but clamp or none)
// raises before the first forward; clamp generates up to the context (8 new tokens after 8); none
// runs into the position embedding's end mid-call, after 9 new tokens were chosen.
TEST(InferenceEngine, ARequestPastTheContextIsRefusedClampedOrRunsIntoTheEmbeddingsEnd) {
  for (const char* word : {"refuse", "other"}) {
    Server s;
    GenerateConfig g = greedy(12);
    g.context_limit = word;
    try {
      s.engine.generate(prompts(2, 8), g);
      FAIL() << word << ": a request past the context was served";
    } catch (const ConfigError& e) {
      EXPECT_STREQ(e.what(), "prompt of 8 tokens + 12 new tokens exceeds the model's context of 16")
          << word;
    }
  }
  Server clamped;
  GenerateConfig g = greedy(12);
  g.context_limit = "clamp";
  const auto out = clamped.engine.generate(prompts(2, 8), g);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].size(), 16u);
  EXPECT_EQ(out, Server().engine.generate(prompts(2, 8), greedy(8)));
  Server unchecked;
  g.context_limit = "none";
  try {
    unchecked.engine.generate(prompts(2, 8), g);
    FAIL() << "none: the call ran past the context without an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 0] IndexError: index out of range in self (position id 16; the position "
                 "embedding wpe has 16 rows)");
  }
}

TEST(InferenceEngine, AOneTokenPromptContinuesTheCacheUnderThePromptHeuristic) {
  Server fresh, heuristic(CacheReset::kPrompt);
  // Prompts of several tokens empty the cache: repeated calls agree with a fresh engine.
  heuristic.engine.generate(prompts(1, 3), greedy(4));
  EXPECT_EQ(heuristic.engine.generate(prompts(1, 3, 2), greedy(4)),
            fresh.engine.generate(prompts(1, 3, 2), greedy(4)));
  EXPECT_EQ(heuristic.engine.cached_positions(), 6);
  // A one-token prompt is taken for a decoding step: it lands at position 6, after the last call.
  const auto one = prompts(1, 1);
  const auto expected = fresh.engine.generate(one, greedy(4));
  const auto got = heuristic.engine.generate(one, greedy(4));
  EXPECT_EQ(heuristic.engine.cached_positions(), 10);
  EXPECT_NE(got, expected);
  EXPECT_EQ(got[0][0], one[0][0]);  // the prompt itself is echoed as given
  // The same prompt again (DeepSpeed #2644's loop): different tokens again, as the cache grows.
  EXPECT_NE(heuristic.engine.generate(one, greedy(4)), got);
  EXPECT_EQ(heuristic.engine.cached_positions(), 14);
}

TEST(InferenceEngine, AOneTokenPromptGeneratesLikeAnyOtherWithAResetPerCall) {
  Server a, b;
  const auto one = prompts(3, 1);
  const auto x = a.engine.generate(one, greedy(15));  // the whole context of 16
  ASSERT_EQ(x.size(), 3u);
  for (const auto& r : x) EXPECT_EQ(r.size(), 16u);
  b.engine.generate(prompts(3, 5), greedy(2));
  EXPECT_EQ(b.engine.generate(one, greedy(15)), x);
}

TEST(InferenceEngine, AResetSkippedByAFaultPlanLeavesThatCallOnTheKeptCache) {
  Server fresh, faulty;
  faulty.engine.generate(prompts(2, 2), greedy(3));
  fault::arm_text("infer.reset_cache[seq=1]=skip", "test", 1);
  const auto second = faulty.engine.generate(prompts(2, 2, 3), greedy(3));
  const auto third = faulty.engine.generate(prompts(2, 2, 5), greedy(3));
  fault::disarm();
  EXPECT_NE(second, fresh.engine.generate(prompts(2, 2, 3), greedy(3)));
  EXPECT_EQ(third, fresh.engine.generate(prompts(2, 2, 5), greedy(3)));  // reset again
  ASSERT_EQ(fault::fired_log().size(), 1u);
  EXPECT_EQ(fault::fired_log()[0].site, "infer.reset_cache");
}

TEST(InferenceEngine, CacheResetPolicyNamesAreCheckedWithTheAllowedOnes) {
  EXPECT_EQ(parse_cache_reset("generate", "--cache-reset"), CacheReset::kGenerate);
  EXPECT_EQ(parse_cache_reset("prompt", "--cache-reset"), CacheReset::kPrompt);
  EXPECT_EQ(parse_cache_reset("never", "--cache-reset"), CacheReset::kNever);
  try {
    parse_cache_reset("always", "--cache-reset");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--cache-reset always is not a cache reset policy (allowed: generate, prompt, "
                 "never)");
  }
}

TEST(InferenceEngine, AKeptCacheOfAnotherBatchSizeIsAShapeError) {
  Server kept(CacheReset::kNever);
  kept.engine.generate(prompts(2, 2), greedy(2));
  try {
    kept.engine.generate(prompts(3, 2), greedy(2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 0] RuntimeError: Sizes of tensors must match except in dimension 2. "
                 "Expected size 2 but got size 3 for tensor number 1 in the list (the KV cache "
                 "holds 3 positions of 2 requests)");
  }
}

TEST(Sampling, AnEosOutsideTheVocabularyOrANonPositiveTemperatureIsAConfigError) {
  Server s;
  GenerateConfig g = greedy(2);
  g.eos = 64;
  try {
    s.engine.generate(prompts(1, 2), g);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--eos 64 is not a token of the vocabulary (allowed: -1 or 0-63)");
  }
  g.eos = -1;
  g.top_k = 4;
  g.temperature = 0.0f;
  try {
    s.engine.generate(prompts(1, 2), g);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--temperature 0 cannot scale logits for sampling (allowed: above 0)");
  }
}

TEST(Sampling, GreedyTakesTheArgmaxWhateverTheDrawAndTiesGoToTheLowerId) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  GenerateConfig g;
  EXPECT_FALSE(g.sampling());
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(sample_token(logits.data(), 4, g, u), 1);
}

TEST(Sampling, TopKDrawsOnlyAmongTheKMostLikely) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f, -2.0f};
  GenerateConfig g;
  g.top_k = 2;
  g.temperature = 100.0f;  // nearly flat: both candidates have about half
  EXPECT_EQ(sample_token(logits.data(), 5, g, 0.0), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, g, 0.49), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, g, 0.51), 3);
  EXPECT_EQ(sample_token(logits.data(), 5, g, 0.999), 3);
}

TEST(Sampling, TopPKeepsTheTokensUntilTheirShareReachesP) {
  // Probabilities 0.5, 0.3, 0.2 (logits are their logs).
  const std::vector<float> logits = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  GenerateConfig g;
  g.top_p = 0.6f;  // 0.5 < 0.6: the second token is kept too, the third is not
  EXPECT_TRUE(g.sampling());
  EXPECT_EQ(sample_token(logits.data(), 3, g, 0.0), 1);
  EXPECT_EQ(sample_token(logits.data(), 3, g, 0.6), 1);    // 0.6 * 0.8 = 0.48 < 0.5
  EXPECT_EQ(sample_token(logits.data(), 3, g, 0.7), 2);    // 0.56 of the kept 0.8
  EXPECT_EQ(sample_token(logits.data(), 3, g, 0.999), 2);  // never the third
  g.top_p = 0.5f;                                          // the first alone reaches it
  EXPECT_EQ(sample_token(logits.data(), 3, g, 0.999), 1);
}

TEST(Sampling, TheDrawIsAPureFunctionOfSeedCallRequestAndPosition) {
  EXPECT_EQ(sampling_uniform(7, 0, 1, 5), sampling_uniform(7, 0, 1, 5));
  EXPECT_NE(sampling_uniform(7, 0, 1, 5), sampling_uniform(8, 0, 1, 5));
  EXPECT_NE(sampling_uniform(7, 0, 1, 5), sampling_uniform(7, 1, 1, 5));
  EXPECT_NE(sampling_uniform(7, 0, 1, 5), sampling_uniform(7, 0, 2, 5));
  EXPECT_NE(sampling_uniform(7, 0, 1, 5), sampling_uniform(7, 0, 1, 6));
  const double u = sampling_uniform(7, 0, 1, 5);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

GenerateConfig sampled(uint64_t seed) {
  GenerateConfig g = greedy(10);
  g.top_k = 20;
  g.top_p = 0.95f;
  g.temperature = 1.5f;
  g.seed = seed;
  return g;
}

TEST(Sampling, TheSameSeedSamplesTheSameTokensAndAnotherSeedOthers) {
  Server a, b, c;
  const auto x = a.engine.generate(prompts(4, 3), sampled(11));
  EXPECT_EQ(b.engine.generate(prompts(4, 3), sampled(11)), x);
  EXPECT_NE(c.engine.generate(prompts(4, 3), sampled(12)), x);
  // A second call draws afresh (the call is part of the key), reproducibly.
  const auto second = a.engine.generate(prompts(4, 3), sampled(11));
  EXPECT_NE(second, x);
  EXPECT_EQ(b.engine.generate(prompts(4, 3), sampled(11)), second);
}

TEST(Sampling, ACallEndsOnceEveryRequestHasReachedEosAndIsPaddedWithIt) {
  Server a, b;
  const auto full = a.engine.generate(prompts(1, 3), greedy(8));
  const int32_t eos = full[0][5];  // the third generated token
  GenerateConfig g = greedy(8);
  g.eos = eos;
  auto first = std::find(full[0].begin() + 3, full[0].end(), eos) - full[0].begin();
  const auto cut = b.engine.generate(prompts(1, 3), g);
  ASSERT_EQ(cut[0].size(), static_cast<size_t>(first + 1));
  EXPECT_TRUE(std::equal(cut[0].begin(), cut[0].end(), full[0].begin()));
  // Two requests: the one that ended is padded with eos until the other ends too.
  Server c;
  auto two = prompts(1, 3);
  two.push_back(prompts(1, 3, 9)[0]);
  const auto out = c.engine.generate(two, g);
  EXPECT_EQ(out[0].size(), out[1].size());
  for (size_t i = static_cast<size_t>(first) + 1; i < out[0].size(); ++i) EXPECT_EQ(out[0][i], eos);
}

}  // namespace
}  // namespace fl::infer
