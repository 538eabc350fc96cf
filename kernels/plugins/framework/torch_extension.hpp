// Force-included (-include) into a plugin the op builder compiles against a framework
// (workload.versions.torch): like a torch extension's PYBIND11_MODULE, the plugin registers its
// operator with the framework at import, so the dynamic loader must resolve the framework's
// symbol, version and C++ ABI included, when the plugin is opened (RTLD_NOW).
#pragma once

#include <string>

namespace fl_torch {
inline namespace FL_TORCH_NS {
int register_operator(const std::string& name);
}  // namespace FL_TORCH_NS
}  // namespace fl_torch

extern "C" int fl_plugin_framework_register() {
  return fl_torch::register_operator(FL_PLUGIN_NAME);
}
