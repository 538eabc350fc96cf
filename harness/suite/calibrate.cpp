#include "harness/suite/calibrate.hpp"

#include <vector>

namespace fl::harness {

double calibrate_gflops(std::chrono::milliseconds budget) {
  constexpr int n = 128;
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) * 0.01f;
    b[i] = static_cast<float>((i * 5) % 11) * 0.01f;
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto until = t0 + budget;
  long gemms = 0;
  do {
    for (int i = 0; i < n; ++i) {
      float* ci = &c[i * n];
      for (int k = 0; k < n; ++k) {
        const float aik = a[i * n + k];
        const float* bk = &b[k * n];
        for (int j = 0; j < n; ++j) ci[j] += aik * bk[j];
      }
    }
    ++gemms;
    // Keeps the values bounded and the loop's result observable.
    c[gemms % (n * n)] *= 0.5f;
  } while (clock::now() < until);
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  volatile float sink = c[0] + c[n * n - 1];
  (void)sink;
  return 2.0 * n * n * n * static_cast<double>(gemms) / secs / 1e9;
}

}  // namespace fl::harness
