#include "harness/score/uncertainty.hpp"

#include <algorithm>

#include "base/stats.hpp"

namespace fl::harness {

Interval wilson(int k, int n, double z) {
  if (n <= 0) return {0, 1};
  const double nn = n, p = k / nn, z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

namespace {

// P(a, x) by its series (x < a + 1).
double gamma_series(double a, double x) {
  double term = 1 / a, sum = term;
  for (int n = 1; n < 1000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Q(a, x) = 1 - P(a, x) by Lentz's continued fraction (x >= a + 1).
double gamma_fraction(double a, double x) {
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double gamma_p(double a, double x) {
  if (x <= 0) return 0;
  return x < a + 1 ? gamma_series(a, x) : 1 - gamma_fraction(a, x);
}

double gamma_p_inverse(double a, double p) {
  double lo = 0, hi = std::max(1.0, a);
  while (gamma_p(a, hi) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (gamma_p(a, mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval poisson_rate(int k, double exposure) {
  if (exposure <= 0) return {};
  const double lo = k == 0 ? 0 : gamma_p_inverse(k, 0.025);
  const double hi = gamma_p_inverse(k + 1, 0.975);
  return {lo / exposure, hi / exposure};
}

uint64_t SplitMix64::next() {
  uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Interval bootstrap(size_t n, const std::function<double(const std::vector<size_t>&)>& stat,
                   const BootstrapOptions& o) {
  if (n == 0 || o.resamples <= 0) return {};
  SplitMix64 rng(o.seed);
  std::vector<double> results;
  results.reserve(static_cast<size_t>(o.resamples));
  std::vector<size_t> idx(n);
  for (int r = 0; r < o.resamples; ++r) {
    for (auto& i : idx) i = rng.below(n);
    const double v = stat(idx);
    if (!std::isnan(v)) results.push_back(v);
  }
  if (results.empty()) return {};
  return {fl::stats::percentile(results, 2.5), fl::stats::percentile(results, 97.5)};
}

Interval bootstrap_percentile(const std::vector<double>& values, double p,
                              const BootstrapOptions& o) {
  std::vector<double> sample(values.size());
  return bootstrap(
      values.size(),
      [&](const std::vector<size_t>& idx) {
        for (size_t i = 0; i < idx.size(); ++i) sample[i] = values[idx[i]];
        return fl::stats::percentile(sample, p);
      },
      o);
}

double mcnemar_exact(int b, int c) {
  const int n = b + c, k = std::min(b, c);
  if (n == 0) return 1;
  double tail = 0;
  if (n <= 1000) {
    // Binomial(n, 1/2) probabilities by their ratios, from 2^-n (exact for small tables).
    double p = std::ldexp(1.0, -n);
    for (int i = 0; i <= k; ++i) {
      tail += p;
      p = p * (n - i) / (i + 1);
    }
  } else {
    // In logs: 2^-n underflows.
    for (int i = 0; i <= k; ++i) {
      tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) -
                       n * std::log(2.0));
    }
  }
  return std::min(1.0, 2 * tail);
}

}  // namespace fl::harness
