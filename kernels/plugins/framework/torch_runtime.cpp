// The framework a JIT-built extension links against (a stand-in for libtorch / libc10), built by
// the op builder for the job's workload.versions.torch and C++ ABI and loaded RTLD_GLOBAL before
// any extension, as `import torch` loads libtorch before an extension module is imported.
//
// Its exported names carry both: the version as an inline namespace (c10's internals change
// between feature releases, so their mangled names do), and the C++ ABI through std::string,
// whose mangled name is std::__cxx11::basic_string under _GLIBCXX_USE_CXX11_ABI=1 and
// std::basic_string under 0, exactly as torch's own symbols differ between its two ABI builds.
#include <string>

#ifndef FL_TORCH_NS
#error "FL_TORCH_NS (the framework's ABI namespace, e.g. v2_1) is set by the op builder"
#endif

namespace fl_torch {
inline namespace FL_TORCH_NS {

int register_operator(const std::string& name) {
  return static_cast<int>(name.size());
}

}  // namespace FL_TORCH_NS
}  // namespace fl_torch
