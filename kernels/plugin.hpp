// Kernel plugins: shared objects (libfl_<name>.so) found on FAULTLINE_PLUGIN_PATH and loaded
// with dlopen at start, the way frameworks load pre-built or JIT-built fused ops. A plugin
// exports `int fl_plugin_abi()` (must be kPluginAbi) and `void fl_plugin_register(
// fl::ops::PluginRegistry*)`, which installs its kernels. A missing or broken plugin is a
// PluginError carrying the dynamic loader's own message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace fl::ops {

class PluginError : public Error {
 public:
  using Error::Error;
};

inline constexpr int kPluginAbi = 1;

using AdamWFn = void (*)(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                         float lr, float beta1, float beta2, float eps, float weight_decay);

struct PluginRegistry {
  AdamWFn adamw = nullptr;
};

// Loads libfl_<name>.so from the first FAULTLINE_PLUGIN_PATH directory that has it and
// registers its kernels. Throws PluginError.
void load_plugin(const std::string& name);
std::vector<std::string> loaded_plugins();
// The kernels plugins installed (null members: built-in).
const PluginRegistry& plugin_kernels();

}  // namespace fl::ops
