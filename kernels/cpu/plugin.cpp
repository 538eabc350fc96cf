#include "kernels/plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "base/settings.hpp"

namespace fl::ops {

FAULTLINE_SETTING(kPluginPath, std::string, "FAULTLINE_PLUGIN_PATH", "",
                  "Directories (':'-separated) searched for kernel plugins libfl_<name>.so");

namespace {
std::mutex g_mu;
PluginRegistry g_registry;
std::vector<std::string> g_loaded;
}  // namespace

void load_plugin(const std::string& name) {
  const std::string file = "libfl_" + name + ".so";
  const std::string path = kPluginPath.get();
  std::string found;
  size_t start = 0;
  while (start <= path.size() && found.empty()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, end - start);
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / file)) {
      found = (std::filesystem::path(dir) / file).string();
    }
    start = end + 1;
  }
  // Not on the path: let the dynamic loader search (LD_LIBRARY_PATH, the cache) and give its
  // own error, as an import of a missing extension does.
  const std::string target = found.empty() ? file : found;
  void* h = ::dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    raise<PluginError>("cannot load kernel plugin '{}': {} (searched FAULTLINE_PLUGIN_PATH={})",
                       name, ::dlerror(), path.empty() ? "<unset>" : path);
  }
  auto abi = reinterpret_cast<int (*)()>(::dlsym(h, "fl_plugin_abi"));
  auto reg = reinterpret_cast<void (*)(PluginRegistry*)>(::dlsym(h, "fl_plugin_register"));
  if (abi == nullptr || reg == nullptr) {
    raise<PluginError>("kernel plugin '{}' ({}) is not a faultline plugin: {}", name, target,
                       ::dlerror());
  }
  if (abi() != kPluginAbi) {
    raise<PluginError>("kernel plugin '{}' ({}) was built for plugin ABI {}, this worker needs {}",
                       name, target, abi(), kPluginAbi);
  }
  std::lock_guard lock(g_mu);
  reg(&g_registry);
  g_loaded.push_back(name);
}

std::vector<std::string> loaded_plugins() {
  std::lock_guard lock(g_mu);
  return g_loaded;
}

const PluginRegistry& plugin_kernels() {
  return g_registry;
}

}  // namespace fl::ops
