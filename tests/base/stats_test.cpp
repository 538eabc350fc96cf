// The order statistics every oracle, detector and score uses: which sample each median picks,
// interpolation, and what an empty list gives.
#include <gtest/gtest.h>

#include <cmath>

#include "base/stats.hpp"

namespace fl::stats {
namespace {

TEST(Stats, MediansOfOddAndEvenCounts) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  // The sample medians: for an even count the larger and the smaller middle sample.
  EXPECT_EQ(upper_median({4, 1, 3, 2}), 3);
  EXPECT_EQ(lower_median({4, 1, 3, 2}), 2);
  EXPECT_EQ(upper_median({5, 1, 9}), 5);
  EXPECT_EQ(lower_median({5, 1, 9}), 5);
  // Two ranks: the lower median is the one that waited least.
  EXPECT_EQ(lower_median({0.9, 0.1}), 0.1);
  EXPECT_EQ(upper_median({0.9, 0.1}), 0.9);
  EXPECT_EQ(median({}), 0);
  EXPECT_EQ(upper_median({}), 0);
  EXPECT_EQ(lower_median({}), 0);
}

TEST(Stats, PercentilesInterpolateBetweenClosestRanks) {
  const std::vector<double> v = {10, 40, 20, 30};
  EXPECT_EQ(percentile(v, 0), 10);
  EXPECT_EQ(percentile(v, 100), 40);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 25);
  EXPECT_DOUBLE_EQ(percentile(v, 95), 38.5);  // 0.95 * 3 = 2.85: 30 + 0.85 * 10
  EXPECT_EQ(percentile({7}, 95), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

}  // namespace
}  // namespace fl::stats
