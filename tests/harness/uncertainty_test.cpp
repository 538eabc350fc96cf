// Intervals and paired tests with known values: Wilson's interval for 8/10, Garwood's Poisson
// limits, McNemar's exact p on worked tables, a bootstrap that is the same for the same seed,
// and the leaderboard's intervals on hand-written outcomes.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "base/stats.hpp"
#include "harness/score/score.hpp"
#include "harness/score/soak.hpp"
#include "harness/score/uncertainty.hpp"

namespace fl::harness {
namespace {

TEST(Uncertainty, WilsonIntervalOfEightInTenIsTheTextbookOne) {
  const Interval i = wilson(8, 10);
  EXPECT_NEAR(i.lo, 0.4902, 5e-5);
  EXPECT_NEAR(i.hi, 0.9433, 5e-5);
  const Interval zero = wilson(0, 10);  // never 0 wide at the edge: [0, 0.278]
  EXPECT_DOUBLE_EQ(zero.lo, 0);
  EXPECT_NEAR(zero.hi, 0.2775, 5e-5);
  const Interval none = wilson(0, 0);
  EXPECT_DOUBLE_EQ(none.lo, 0);
  EXPECT_DOUBLE_EQ(none.hi, 1);
}

TEST(Uncertainty, PoissonRateHasGarwoodsExactLimits) {
  // 0 events: [0, -ln 0.025]; 1 event: [0.0253, 5.5716]; 10 events: [4.7954, 18.3904].
  const Interval z = poisson_rate(0, 1);
  EXPECT_DOUBLE_EQ(z.lo, 0);
  EXPECT_NEAR(z.hi, -std::log(0.025), 1e-9);
  const Interval one = poisson_rate(1, 1);
  EXPECT_NEAR(one.lo, 0.025318, 1e-6);
  EXPECT_NEAR(one.hi, 5.571643, 1e-6);
  const Interval ten = poisson_rate(10, 2);  // per unit of exposure: halved
  EXPECT_NEAR(ten.lo, 4.795389 / 2, 1e-6);
  EXPECT_NEAR(ten.hi, 18.390358 / 2, 1e-6);
  // The nightly suite's 0.067 clean hours without an alarm: up to 55 per hour.
  EXPECT_NEAR(poisson_rate(0, 0.067).hi, 55.06, 0.01);
  EXPECT_FALSE(poisson_rate(0, 0).defined());
}

TEST(Uncertainty, McNemarExactMatchesTheBinomialTail) {
  // b = 1, c = 9: 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024.
  EXPECT_DOUBLE_EQ(mcnemar_exact(1, 9), 22.0 / 1024);
  EXPECT_DOUBLE_EQ(mcnemar_exact(9, 1), 22.0 / 1024);
  // b = 0, c = 5: 2 / 32.
  EXPECT_DOUBLE_EQ(mcnemar_exact(0, 5), 2.0 / 32);
  EXPECT_DOUBLE_EQ(mcnemar_exact(3, 3), 1.0);  // capped at 1
  EXPECT_DOUBLE_EQ(mcnemar_exact(0, 0), 1.0);
  EXPECT_GT(mcnemar_exact(1000, 1100), 0.02);  // large tables stay finite
  EXPECT_LT(mcnemar_exact(1000, 1100), 0.05);
}

TEST(Uncertainty, BootstrapIsTheSameForTheSameSeedAndCoversTheMedian) {
  std::vector<double> v;
  for (int i = 0; i < 30; ++i) v.push_back(0.5 * i + 0.013 * i * i);
  const Interval a = bootstrap_percentile(v, 50, {2000, 42});
  const Interval b = bootstrap_percentile(v, 50, {2000, 42});
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  const double median = fl::stats::median(v);
  EXPECT_LT(a.lo, median);
  EXPECT_GT(a.hi, median);
  EXPECT_GE(a.lo, v.front());
  EXPECT_LE(a.hi, v.back());
  // Another seed draws other resamples: the interval of the mean moves.
  auto mean = [&](const std::vector<size_t>& idx) {
    double s = 0;
    for (size_t i : idx) s += v[i];
    return s / static_cast<double>(idx.size());
  };
  const Interval m42 = bootstrap(v.size(), mean, {2000, 42});
  EXPECT_EQ(m42.lo, bootstrap(v.size(), mean, {2000, 42}).lo);
  EXPECT_NE(m42.lo, bootstrap(v.size(), mean, {2000, 43}).lo);
  // The generator is splitmix64: its first output for seed 0 is the published one.
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xe220a8397b1dcdafULL);
  EXPECT_FALSE(bootstrap_percentile({}, 50, {}).defined());
}

// Ten positives (A detects 9, B detects 1 of them, both the same one) and two clean runs.
std::vector<DetectorScore> paired_scores() {
  DetectorScore a, b;
  a.detector = "a";
  b.detector = "b";
  for (size_t i = 0; i < 10; ++i) {
    RunOutcome oa{i, true, i < 9, false, 0, 0, i < 9 ? 1.0 + 0.1 * i : std::nan("")};
    RunOutcome ob{i, true, i == 0, false, 0, 0, i == 0 ? 0.5 : std::nan("")};
    a.outcomes.push_back(oa);
    b.outcomes.push_back(ob);
  }
  for (size_t i = 10; i < 12; ++i) {
    a.outcomes.push_back({i, false, false, false, 0, 0.5, std::nan("")});
    b.outcomes.push_back({i, false, false, true, 2, 0.5, std::nan("")});
  }
  return {a, b};
}

TEST(Uncertainty, PairedComparisonCountsDiscordantRunsAndTestsThem) {
  const auto scores = paired_scores();
  const PairedComparison c = compare_detectors(scores, "a", "b");
  EXPECT_EQ(c.both, 1);
  EXPECT_EQ(c.only_a, 8);
  EXPECT_EQ(c.only_b, 0);
  EXPECT_EQ(c.neither, 1);
  EXPECT_DOUBLE_EQ(c.mcnemar_p, 2.0 / 256);
  EXPECT_EQ(c.latency_pairs, 1);
  EXPECT_DOUBLE_EQ(c.latency_diff_median_s, 0.5);
  const std::string text = comparison_text(c, false);
  EXPECT_NE(text.find("both detected 1, only a 8, only b 0, neither 1; McNemar exact p = 0.0078"),
            std::string::npos)
      << text;
  EXPECT_THROW(compare_detectors(scores, "a", "c"), std::exception);
}

TEST(Uncertainty, ScoreIntervalsComeFromTheOutcomes) {
  auto scores = paired_scores();
  DetectorScore& a = scores[0];
  a.positives = 10;
  a.negatives = 2;
  a.tp = 9;
  a.clean_hours = 1.0;
  for (const auto& o : a.outcomes) {
    if (o.detected) a.latency_inject_s.push_back(o.latency_s);
  }
  const ScoreIntervals ci = score_intervals(a, {});
  EXPECT_NEAR(ci.recall.lo, wilson(9, 10).lo, 1e-12);
  EXPECT_DOUBLE_EQ(ci.precision.hi, 1.0);
  EXPECT_NEAR(ci.fp_per_hour.hi, -std::log(0.025), 1e-9);
  EXPECT_LE(ci.f1.lo, a.f1());
  EXPECT_GE(ci.f1.hi, a.f1());
  EXPECT_LE(ci.latency_p50.lo, 1.4);
  EXPECT_GE(ci.latency_p50.hi, 1.4);
  const ScoreIntervals again = score_intervals(a, {});
  EXPECT_EQ(ci.f1.lo, again.f1.lo);
  EXPECT_EQ(ci.latency_p95.hi, again.latency_p95.hi);
}

}  // namespace
}  // namespace fl::harness

namespace fl::harness {
namespace {

TEST(Soak, DurationsTakeHoursMinutesAndSeconds) {
  EXPECT_DOUBLE_EQ(parse_duration("2h"), 7200);
  EXPECT_DOUBLE_EQ(parse_duration("90m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("45s"), 45);
  EXPECT_DOUBLE_EQ(parse_duration("3600"), 3600);
  EXPECT_DOUBLE_EQ(parse_duration("0.5h"), 1800);
  for (const char* bad : {"", "2x", "h", "0", "-1h"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("--for '{}': a duration above 0 such as 2h, "
                                                   "90m, 45s or 3600 (seconds)",
                                                   bad));
    }
  }
}

}  // namespace
}  // namespace fl::harness
