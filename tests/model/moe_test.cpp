// The MoE router against hand-computed values (DeepSpeed's top1gating / top2gating), its backward
// against finite differences, the expert layout of each EP rank, and the MoE config errors.
#include "workloads/model/moe.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"

namespace fl::model {
namespace {

TEST(MoeCapacity, FollowsDeepSpeedsCapacityFormula) {
  EXPECT_EQ(gshard_capacity(64, 4, 1, 1.0f, 4), 16);   // ceil(64 / 4 x 1)
  EXPECT_EQ(gshard_capacity(64, 4, 2, 1.25f, 4), 40);  // top-2 doubles the factor
  EXPECT_EQ(gshard_capacity(8, 16, 1, 1.0f, 4), 4);    // ceil(0.5) = 1, raised to min_capacity
  EXPECT_EQ(gshard_capacity(6, 4, 1, 1.0f, 0), 2);     // ceil(1.5)
}

TEST(MoeRouter, TopOneKeepsTheGateProbabilityAndDropsPastTheCapacity) {
  // 4 tokens over 2 experts: first choices 0, 0, 1, 0; capacity ceil(4 / 2) = 2.
  const std::vector<float> logits = {1, 0, 2, 0, 0, 1, 3, 0};
  Routing r = route(logits.data(), 4, 2, 1, true);
  EXPECT_EQ(r.expert, (std::vector<int>{0, 0, 1, 0}));
  EXPECT_EQ(r.counts, (std::vector<int>{3, 1}));
  apply_capacity(r, gshard_capacity(4, 2, 1, 1.0f, 0));
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.location, (std::vector<int>{0, 1, 0, -1}));  // the third token of expert 0 dropped
  EXPECT_EQ(r.dropped, 1);
  const float s1 = 1.0f / (1.0f + std::exp(-1.0f)), s2 = 1.0f / (1.0f + std::exp(-2.0f));
  EXPECT_NEAR(r.weight[0], s1, 1e-6);
  EXPECT_NEAR(r.weight[1], s2, 1e-6);
  EXPECT_NEAR(r.weight[2], s1, 1e-6);
  EXPECT_EQ(r.weight[3], 0.0f);
  // l_aux = E x sum(me x ce): me0 = (0.7310586 + 0.8807971 + 0.2689414 + 0.9525741) / 4,
  // ce = (3/4, 1/4).
  const double me0 = (0.7310586 + 0.8807971 + 0.2689414 + 0.9525741) / 4;
  EXPECT_NEAR(r.aux, 2 * (me0 * 0.75 + (1 - me0) * 0.25), 1e-6);
}

TEST(MoeRouter, TopTwoNormalisesOverTheKeptChoicesAndPlacesSecondChoicesAfterFirst) {
  // Token 0 prefers experts 0 then 1, token 1 experts 1 then 0 (3 experts).
  const std::vector<float> logits = {2, 1, 0, 1, 2, 0};
  Routing r = route(logits.data(), 2, 3, 2, true);
  EXPECT_EQ(r.expert, (std::vector<int>{0, 1, 1, 0}));
  // Second choices sit after every first choice of their expert (locations2 += sum(mask1)).
  EXPECT_EQ(r.location, (std::vector<int>{0, 1, 0, 1}));
  Routing kept = r;
  apply_capacity(kept, 2);
  const float w1 = 1.0f / (1.0f + std::exp(-1.0f));  // p0 / (p0 + p1) with logits 2 and 1
  EXPECT_NEAR(kept.weight[0], w1, 1e-6);
  EXPECT_NEAR(kept.weight[1], 1 - w1, 1e-6);
  EXPECT_EQ(kept.dropped, 0);
  // capacity_factor 0.5: ceil(2 / 3 x 1) = 1, both second choices dropped, the first weighs 1.
  apply_capacity(r, gshard_capacity(2, 3, 2, 0.5f, 0));
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.location, (std::vector<int>{0, -1, 0, -1}));
  EXPECT_EQ(r.dropped, 2);
  EXPECT_FLOAT_EQ(r.weight[0], 1.0f);
  EXPECT_EQ(r.weight[1], 0.0f);
}

TEST(MoeRouter, MixtralCountsEveryChoiceInTheAuxLossAndNeverDrops) {
  const std::vector<float> logits = {2, 1, 0, 1, 2, 0};
  Routing r = route(logits.data(), 2, 3, 2, false);
  apply_capacity(r, 0);
  EXPECT_EQ(r.dropped, 0);
  // tokens_per_expert summed over the k choices: (1, 1, 0).
  EXPECT_EQ(r.top1_frac, (std::vector<float>{1.0f, 1.0f, 0.0f}));
  double me0 = 0, me1 = 0;
  for (int s = 0; s < 2; ++s) {
    me0 += r.probs[static_cast<size_t>(s) * 3] / 2;
    me1 += r.probs[static_cast<size_t>(s) * 3 + 1] / 2;
  }
  EXPECT_NEAR(r.aux, 3 * (me0 + me1), 1e-6);
}

// sum_j c_j w_j + daux x aux, for the finite differences below.
double objective(const std::vector<float>& logits, int S, int E, int k, bool gshard, int cap,
                 const std::vector<float>& c, float daux) {
  Routing r = route(logits.data(), S, E, k, gshard);
  apply_capacity(r, cap);
  double v = daux * r.aux;
  for (size_t i = 0; i < c.size(); ++i) v += c[i] * r.weight[i];
  return v;
}

TEST(MoeRouter, BackwardMatchesFiniteDifferencesForTopOneAndTopTwo) {
  const std::vector<float> logits = {0.3f, -0.2f, 0.9f, 0.1f, 0.5f, -0.4f, -0.3f, 0.8f, 0.2f};
  for (int k : {1, 2}) {
    const std::vector<float> c = k == 1 ? std::vector<float>{0.7f, -1.1f, 0.4f}
                                        : std::vector<float>{0.7f, -1.1f, 0.4f, 0.2f, -0.5f, 0.9f};
    Routing r = route(logits.data(), 3, 3, k, true);
    apply_capacity(r, 4);
    const std::vector<float> d = router_backward(r, c, 0.3f);
    for (size_t i = 0; i < logits.size(); ++i) {
      std::vector<float> up = logits, down = logits;
      up[i] += 1e-3f;
      down[i] -= 1e-3f;
      const double fd =
          (objective(up, 3, 3, k, true, 4, c, 0.3f) - objective(down, 3, 3, k, true, 4, c, 0.3f)) /
          2e-3;
      // The aux loss's ce is a count: constant under small changes, as in DeepSpeed.
      EXPECT_NEAR(d[i], fd, 2e-3) << "top-" << k << " logit " << i;
    }
  }
}

GptConfig moe_model(int experts, int interval) {
  GptConfig m = GptConfig::tiny();
  m.moe.experts = experts;
  m.moe.interval = interval;
  return m;
}

TEST(MoeLayout, EachEpRankHoldsItsOwnExpertsWithTheSingleRankValues) {
  const GptConfig m = moe_model(4, 2);  // 2 blocks: block 1 is MoE
  const ParamLayout dense(m, 1, 0, 1, 0);
  EXPECT_NO_THROW(dense.spec("h0.mlp.fc.weight"));
  EXPECT_THROW(dense.spec("h1.mlp.fc.weight"), Error);
  EXPECT_EQ(dense.spec("h1.moe.gate.weight").rows, 4);
  const ParamLayout all = ParamLayout::experts(m, 1, 0);
  const ParamLayout r1 = ParamLayout::experts(m, 2, 1);
  ASSERT_EQ(r1.groups().size(), 2u);
  EXPECT_EQ(r1.specs().front().name, "h1.moe.experts.2.fc.weight");
  EXPECT_EQ(r1.specs().back().name, "h1.moe.experts.3.proj.bias");
  const size_t C = 32, per_expert = 4 * C * C + 4 * C + 4 * C * C + C;
  EXPECT_EQ(r1.total(), 2 * per_expert);
  EXPECT_EQ(all.total(), 4 * per_expert);
  // Expert 3 starts from the same values whichever rank holds it.
  std::vector<float> a(all.total()), b(r1.total());
  all.initialize(a.data(), 1234);
  r1.initialize(b.data(), 1234);
  const auto& s_all = all.spec("h1.moe.experts.3.fc.weight");
  const auto& s_r1 = r1.spec("h1.moe.experts.3.fc.weight");
  for (size_t i = 0; i < s_all.numel(); ++i) {
    ASSERT_EQ(a[s_all.offset + i], b[s_r1.offset + i]) << i;
  }
}

std::string config_error(const GptConfig& m, Layout l) {
  try {
    validate(m, l);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Layout dp_layout(int dp) {
  Layout l;
  l.world = dp;
  l.dp = dp;
  return l;
}

TEST(MoeConfigErrors, NameTheOptionInDeepSpeedsWords) {
  GptConfig m = moe_model(6, 1);
  m.moe.ep_size = 4;
  EXPECT_EQ(config_error(m, dp_layout(4)),
            "Number of experts (6) should be divisible by expert parallel size (4) "
            "(workload.moe.ep_size allowed for 6 experts at dp 4: 1, 2)");
  m = moe_model(8, 1);
  m.moe.ep_size = 8;
  EXPECT_EQ(config_error(m, dp_layout(4)),
            "4 is not divisible by 8 (workload.moe.ep_size 8 must divide the data-parallel size "
            "4; allowed for 8 experts: 1, 2, 4)");
  m = moe_model(4, 1);
  m.moe.top_k = 3;
  EXPECT_EQ(config_error(m, dp_layout(2)),
            "workload.moe.top_k is 3: allowed is 1 or 2 (top-1 and top-2 gating, DeepSpeed's "
            "top1gating and top2gating)");
  m = moe_model(4, 1);
  m.moe.dropless = true;
  m.moe.ep_size = 2;
  EXPECT_EQ(config_error(m, dp_layout(2)),
            "workload.moe.dropless (Mixtral's sparse block) keeps every expert on every rank: "
            "allowed ep_size is 1, not 2");
  m = moe_model(4, 3);
  EXPECT_EQ(config_error(m, dp_layout(2)),
            "workload.moe.interval is 3: allowed is 1 to 2 (blocks whose 1-based number is a "
            "multiple of it are MoE; the model has 2 blocks)");
  m = moe_model(4, 1);
  m.moe.capacity_factor = 0;
  EXPECT_EQ(config_error(m, dp_layout(2)),
            "workload.moe.capacity_factor is 0: allowed is a positive number (DeepSpeed's default "
            "is 1.0)");
  m = moe_model(0, 1);
  m.moe.ep_size = 2;
  EXPECT_EQ(config_error(m, dp_layout(2)),
            "workload.moe.ep_size is 2 but workload.moe.experts is 0: expert parallelism needs "
            "experts (allowed: ep_size 1 without them)");
  Layout tp2 = dp_layout(1);
  tp2.world = 2;
  tp2.tp = 2;
  EXPECT_EQ(config_error(moe_model(4, 1), tp2),
            "workload.moe with topology.tp 2 and pp 1: the MoE block runs with tensor- and "
            "pipeline-parallel size 1 only (allowed: tp 1, pp 1)");
  EXPECT_EQ(config_error(moe_model(4, 1), dp_layout(2)), "");
}

}  // namespace
}  // namespace fl::model
