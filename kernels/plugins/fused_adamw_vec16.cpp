// The fused_adamw_vec16 kernel plugin (libfl_fused_adamw_vec16.so): AdamW over blocks of 16
// elements, the shape of a vectorised kernel that was written without a remainder loop. It
// declares that limitation (adamw_multiple = 16); the dispatcher refuses other lengths.
#include "kernels/cpu/adamw_impl.hpp"
#include "kernels/plugin.hpp"
#include "kernels/plugins/exports.hpp"

namespace {
constexpr size_t kWidth = 16;

void adamw_vec16(float* param, const float* grad, float* m, float* v, size_t n, int64_t t, float lr,
                 float beta1, float beta2, float eps, float weight_decay) {
  for (size_t i = 0; i + kWidth <= n; i += kWidth) {
    fl::ops::impl::adamw(param + i, grad + i, m + i, v + i, kWidth, t, lr, beta1, beta2, eps,
                         weight_decay);
  }
}
}  // namespace

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->adamw = &adamw_vec16;
  r->adamw_multiple = kWidth;
}
