// 95% intervals and paired tests for detector scores (docs/benchmarks.md, "Scores with
// uncertainty"). Proportions get Wilson score intervals; counts of false alarms over clean hours
// an exact (Garwood) Poisson interval; statistics without a closed form (F1, latency
// percentiles) a percentile bootstrap over runs from a seeded generator, so the same runs and
// seed give the same interval on every machine. Two detectors on the same runs: McNemar's exact
// test on the runs one detected and the other missed, a paired bootstrap on latency.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fl::harness {

struct Interval {
  double lo = std::nan(""), hi = std::nan("");
  bool defined() const { return !std::isnan(lo) && !std::isnan(hi); }
};

// z of a two-sided 95% interval.
inline constexpr double kZ95 = 1.959963984540054;

// Wilson score interval of k successes in n trials; [0, 1] for n = 0.
Interval wilson(int k, int n, double z = kZ95);

// Exact (Garwood) 95% interval of a Poisson rate: k events over `exposure` (hours), from the
// chi-square quantiles (gamma quantiles here); [0, 3.689/exposure] for k = 0. Undefined for no
// exposure.
Interval poisson_rate(int k, double exposure);

// The regularised lower incomplete gamma P(a, x) and its inverse in x (bisection).
double gamma_p(double a, double x);
double gamma_p_inverse(double a, double p);

// A small, portable generator (splitmix64): the same seed gives the same resamples everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next();
  // Uniform in [0, n) (n > 0; the modulo bias is below 2^-40 for the n used here).
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t s_;
};

struct BootstrapOptions {
  int resamples = 2000;
  uint64_t seed = 1;
};

// Percentile bootstrap: `stat` of `resamples` resamples (indices drawn with replacement from
// 0..n-1), the 2.5th and 97.5th percentiles of the results that are numbers. Undefined for n = 0.
Interval bootstrap(size_t n, const std::function<double(const std::vector<size_t>&)>& stat,
                   const BootstrapOptions& o);
// The interval of the p-th percentile of `values`, resampling the values themselves.
Interval bootstrap_percentile(const std::vector<double>& values, double p,
                              const BootstrapOptions& o);

// McNemar's exact test: b runs only A detected, c runs only B detected; the two-sided p-value
// of the binomial(b + c, 1/2) (1 when b = c = 0).
double mcnemar_exact(int b, int c);

}  // namespace fl::harness
