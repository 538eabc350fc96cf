// Order statistics over samples, the one definition every part of the project uses (oracles,
// detectors, scoring, suites). Each takes its samples by value and sorts the copy.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace fl::stats {

// The middle value; for an even count the mean of the two middle ones. 0 without samples.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A sample that is a median: the upper one (v[n/2]) or the lower one (v[(n-1)/2]); for two
// samples the larger or the smaller. 0 without samples.
inline double upper_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
inline double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t k = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The p-th percentile (0-100), interpolated linearly between the closest ranks (numpy's
// default). NaN without samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace fl::stats
