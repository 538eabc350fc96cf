// The tanh-approximation GeLU, shared by the built-in kernel and the inference_kernels plugin.
#pragma once

#include <cmath>
#include <cstddef>
#include <numbers>

namespace fl::ops::impl {

// sqrt(2 / pi)
inline constexpr float kGeluScale =
    static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);

inline void gelu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

}  // namespace fl::ops::impl
