// The AdamW update loop, shared by the built-in kernel and the fused_adamw plugin (which is
// built as its own shared object and loaded at start, like a framework's JIT-built op).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace fl::ops::impl {

inline void adamw(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                  float lr, float beta1, float beta2, float eps, float weight_decay) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float mh = m[i] / c1;
    const float vh = v[i] / c2;
    param[i] -= lr * (mh / (std::sqrt(vh) + eps) + weight_decay * param[i]);
  }
}

}  // namespace fl::ops::impl
