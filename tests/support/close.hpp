// Test support: element-wise comparison of two float vectors with a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fl::test {

// Every |got - want| <= rel · scale + 1e-7, where scale is |want[i]| or, with relative_to_max,
// the largest |want|. Equal values (infinities too) and NaN against NaN agree. Reports the first
// five differences as `what[i]: <label> got, reference want`.
inline void expect_all_close(const std::vector<float>& got, const std::vector<float>& want,
                             double rel, const char* what, bool relative_to_max = false,
                             const char* label = "got") {
  ASSERT_EQ(got.size(), want.size()) << what;
  double maxabs = 0;
  for (float w : want) maxabs = std::max(maxabs, static_cast<double>(std::fabs(w)));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    const double scale = relative_to_max ? maxabs : std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= rel * scale + 1e-7)) {
      if (bad++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: " << label << " " << got[i] << ", reference "
                      << want[i];
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

}  // namespace fl::test
