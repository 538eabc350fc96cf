// Kernel plugins: shared objects (libfl_<name>.so) found on FAULTLINE_PLUGIN_PATH and loaded
// with dlopen at start, the way frameworks load pre-built or JIT-built fused ops. A plugin
// exports `int fl_plugin_abi()` (must be kPluginAbi) and `void fl_plugin_register(
// fl::ops::PluginRegistry*)`, which installs its kernels, and may export `const char*
// fl_plugin_archs()`: the device capabilities its kernels were compiled for ("8.0;9.0"), checked
// against the rank's device. A missing or broken plugin is a PluginError carrying the dynamic
// loader's (or the compiler's) own message.
//
// JIT mode builds the plugin from source at start, as DeepSpeed's op builder does: the compiler
// named by CXX (default c++) compiles FAULTLINE_PLUGIN_SRC/<name>.cpp into FAULTLINE_JIT_DIR
// under a file lock (one rank builds, the others wait and reuse the result), for the
// capabilities in FAULTLINE_ARCH_LIST.
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

inline constexpr int kPluginAbi = 2;  // 2: PluginRegistry gained adamw_multiple, gelu_forward

using AdamWFn = void (*)(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                         float lr, float beta1, float beta2, float eps, float weight_decay);

using GeluFn = void (*)(float* out, const float* inp, size_t n);

struct PluginRegistry {
  AdamWFn adamw = nullptr;
  // The AdamW kernel only handles lengths that are a multiple of this (a vectorised loop without
  // a remainder); the dispatcher refuses other lengths instead of running past the buffer.
  size_t adamw_multiple = 1;
  GeluFn gelu_forward = nullptr;
  std::string adamw_plugin;  // which plugin installed `adamw` (set by the loader)
};

// Loads libfl_<name>.so from the first FAULTLINE_PLUGIN_PATH directory that has it (or, with
// `jit`, builds it first) and registers its kernels. Throws PluginError, also for a name that is
// not an identifier ([A-Za-z_][A-Za-z0-9_]*): a name never becomes a path outside the plugin
// directories or reaches a shell.
void check_plugin_name(const std::string& name);
void load_plugin(const std::string& name, bool jit = false);
// Builds libfl_<name>.so from source (see above) unless an identical build is cached; returns
// its path. Throws PluginError with the compiler's first errors and the log's path. The compiler
// ($CXX, default c++) runs from an argv, without a shell.
std::string jit_build_plugin(const std::string& name);
// The capability of this rank's device ("9.0"): FAULTLINE_DEVICE_CAPABILITY on CPU ranks (a
// simulated device), the real one once a GPU backend sets it.
std::string device_capability();
void set_device_capability(const std::string& cap);
std::vector<std::string> loaded_plugins();

// The simulated CPU (cpu_isa.cpp). A plugin may export `const char* fl_plugin_isa()`: the
// instruction set its kernels use (JIT builds: FAULTLINE_JIT_ISA, default the building rank's
// best). Nothing checks it at load, as nothing does for a real extension; the first call into
// one of its kernels on a CPU without that set (FAULTLINE_CPU_FLAGS) traps with SIGILL.
const std::vector<std::string>& known_isas();
bool cpu_has(const std::string& isa);
std::string jit_target_isa();
void note_plugin_isa(const std::string& plugin, const std::string& isa);
void before_plugin_kernel(const std::string& plugin);
// The kernels plugins installed (null members: built-in).
const PluginRegistry& plugin_kernels();

}  // namespace fl::ops
