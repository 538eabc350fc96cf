// The fused_adamw_half_state kernel plugin (libfl_fused_adamw_half_state.so): AdamW that keeps its
// two moments in fp16 to halve the optimizer's memory and computes its denominator in fp16 too,
// so eps (1e-8, below fp16's smallest subnormal 2^-24) rounds to 0. A gradient under about 8e-4
// (beta2 0.95) leaves a second moment (1 - beta2) g^2 that rounds to 0 while its first moment does
// not: the update m / (sqrt(0) + 0) is infinite, and a gradient of exactly 0 (an embedding row no
// token of the batch used) gives 0 / 0. The parameter, then the loss, stop being finite. This is
// the flaw of a half-precision optimizer kernel written with fp32's eps; the fused_adamw plugin
// (fp32 state) is the fix.
#include <cmath>

#include "base/dtype.hpp"
#include "kernels/plugin.hpp"
#include "kernels/plugins/exports.hpp"

namespace {

float to_half(float x) {
  return fl::half_to_float(fl::float_to_half(x));
}

void adamw_half_state(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                      float lr, float beta1, float beta2, float eps, float weight_decay) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  const float eps_half = to_half(eps);
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = to_half(beta1 * m[i] + (1.0f - beta1) * g);
    v[i] = to_half(beta2 * v[i] + (1.0f - beta2) * g * g);
    const float denom = to_half(std::sqrt(v[i] / c2)) + eps_half;
    param[i] -= lr * ((m[i] / c1) / denom + weight_decay * param[i]);
  }
}

}  // namespace

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->adamw = &adamw_half_state;
}
