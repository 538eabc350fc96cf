#include "kernels/plugin.hpp"

#include <dlfcn.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "base/file_lock.hpp"
#include "base/private_dir.hpp"
#include "base/settings.hpp"
#include "base/subprocess.hpp"
#include "injector/site.hpp"
#include "kernels/cpu/plugin_package.hpp"
#include "kernels/versions.hpp"

namespace fl::ops {

FAULTLINE_SETTING(kPluginPath, std::string, "FAULTLINE_PLUGIN_PATH", "",
                  "Directories (':'-separated) searched for kernel plugins libfl_<name>.so");
FAULTLINE_SETTING(kPluginSrc, std::string, "FAULTLINE_PLUGIN_SRC",
                  FAULTLINE_SOURCE_DIR "/kernels/plugins",
                  "Where JIT builds find plugin sources (<name>.cpp)");
// Not a fixed name in /tmp: another user could make it first and plant a library there that a
// later root run loads (issue 32).
FAULTLINE_SETTING(kJitDir, std::string, "FAULTLINE_JIT_DIR", "",
                  "Build directory and cache of JIT-built plugins (default: $TMPDIR/faultline-jit-"
                  "UID, 0700; a directory another user can write is refused)");
FAULTLINE_SETTING(kArchList, std::string, "FAULTLINE_ARCH_LIST", "8.0;9.0",
                  "Device capabilities JIT-built plugins are compiled for (';'-separated)");
FAULTLINE_SETTING(kDeviceCapability, std::string, "FAULTLINE_DEVICE_CAPABILITY", "9.0",
                  "Capability of a CPU rank's simulated device (plugins must be built for it)");

namespace {
namespace fs = std::filesystem;
// FAULTLINE_JIT_ISA as written ("native" stays "native" whatever the CPU).
std::string kJitIsaKey() {
  const char* v = std::getenv("FAULTLINE_JIT_ISA");
  return v != nullptr ? v : "native";
}
std::mutex g_mu;
PluginRegistry g_registry;
std::vector<std::string> g_loaded;
std::string g_capability;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The compiler's error lines (up to three), or the log's last line when none says "error".
std::string first_errors(const std::string& log) {
  std::vector<std::string> errs;
  std::string last, line;
  std::stringstream in(log);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (errs.size() < 3 &&
        (line.find("error") != std::string::npos || line.find("not found") != std::string::npos)) {
      errs.push_back(line);
    }
  }
  if (errs.empty()) return last;
  return fmt::format("{}", fmt::join(errs, " | "));
}

}  // namespace

std::string device_capability() {
  std::lock_guard lock(g_mu);
  return g_capability.empty() ? kDeviceCapability.get() : g_capability;
}

void set_device_capability(const std::string& cap) {
  std::lock_guard lock(g_mu);
  g_capability = cap;
}

void check_plugin_name(const std::string& name) {
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*");
  if (!std::regex_match(name, identifier)) {
    raise<PluginError>(
        "kernel plugin name '{}' is not an identifier (allowed: [A-Za-z_][A-Za-z0-9_]*; a plugin "
        "is named, not given as a path)",
        name);
  }
}

namespace {

// One shared object from one source, compiled to a temporary name and renamed into place (the
// caller holds the cache's lock). Throws PluginError with the compiler's first errors.
struct Compile {
  std::string name, cxx, flags;
  fs::path src, out, log;
  std::vector<std::string> defines;  // -D..., -include ... after the common flags
};

void compile_shared(const Compile& c) {
  std::error_code ec;
  const fs::path tmp = c.out.string() + fmt::format(".tmp.{}", ::getpid());
  // The compiler runs from an argv, never through a shell: CXX and CXXFLAGS are split on
  // whitespace, and no name or path is ever parsed as shell text.
  std::vector<std::string> argv = split_words(c.cxx);
  if (argv.empty()) raise<PluginError>("cannot build kernel plugin '{}': CXX is blank", c.name);
  for (const char* f : {"-std=c++20", "-O2", "-fPIC", "-shared"}) argv.emplace_back(f);
  for (auto& f : split_words(c.flags)) argv.push_back(f);
  argv.insert(argv.end(), c.defines.begin(), c.defines.end());
  argv.push_back(c.src.string());
  argv.push_back("-o");
  argv.push_back(tmp.string());
  ToolOutcome built;
  try {
    built = run_tool_status(argv);
  } catch (const std::exception& e) {
    built = {127, e.what()};  // no such compiler: what a shell would have said, without one
  }
  std::ofstream(c.log, std::ios::binary | std::ios::trunc) << built.output;
  if (built.status != 0 || !fs::exists(tmp)) {
    fs::remove(tmp, ec);
    raise<PluginError>(
        "building kernel plugin '{}' failed (compiler exit status {}): {} [CXX={} CXXFLAGS={}; "
        "log: {}]",
        c.name, built.status, first_errors(built.output), c.cxx, c.flags, c.log.string());
  }
  fs::rename(tmp, c.out, ec);
  if (ec) {
    raise<PluginError>("cannot install the built plugin {}: {}", c.out.string(), ec.message());
  }
}

// What compiling against the framework adds: its ABI flag and namespace, and the glue that
// registers the plugin's operator with it (torch's common flags carry -D_GLIBCXX_USE_CXX11_ABI).
// `glue`: the framework's glue header (torch/extension.h's stand-in, from the tree).
std::vector<std::string> framework_defines(const std::string& name, const std::string& torch,
                                           bool cxx11_abi, const fs::path& glue) {
  return {fmt::format("-D_GLIBCXX_USE_CXX11_ABI={}", cxx11_abi ? 1 : 0),
          "-DFL_TORCH_NS=" + framework_namespace(torch),
          fmt::format("-DFL_PLUGIN_NAME=\"{}\"", name), "-include", glue.string()};
}

fs::path jit_cache_dir(const std::string& name) {
  try {
    return private_cache_dir(kJitDir.get(), "faultline-jit", "FAULTLINE_JIT_DIR");
  } catch (const Error& e) {
    raise<PluginError>("cannot build kernel plugin '{}': {}", name, e.what());
  }
}

const char* cxx_of_env() {
  const char* cxx_env = std::getenv("CXX");
  return cxx_env != nullptr && *cxx_env != '\0' ? cxx_env : "c++";
}

// The framework the job imports (workload.versions.torch and cxx11_abi), built once per version
// and ABI: libfl_torch-v2_1_0-abi1.so.
std::string jit_build_framework(const JobVersions& v) {
  const fs::path dir = jit_cache_dir("torch") / "framework";
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string stem =
      fmt::format("libfl_torch-{}-abi{}", framework_namespace(v.torch), v.cxx11_abi ? 1 : 0);
  const fs::path out = dir / (stem + ".so");
  const auto lock = FileLock::acquire<PluginError>((dir / (stem + ".lock")).string());
  if (fs::exists(out)) return out.string();
  compile_shared({"torch",
                  cxx_of_env(),
                  "",
                  fs::path(kPluginSrc.get()) / "framework" / "torch_runtime.cpp",
                  out,
                  dir / (stem + ".log"),
                  {fmt::format("-D_GLIBCXX_USE_CXX11_ABI={}", v.cxx11_abi ? 1 : 0),
                   "-DFL_TORCH_NS=" + framework_namespace(v.torch)}});
  return out.string();
}

// DeepSpeed's installed_cuda_version, the first thing its CUDA check does: torch's CUDA_HOME
// and `CUDA_HOME/bin/nvcc -V`. torch takes CUDA_HOME (else CUDA_PATH) from the environment as
// written, with no check; `nvcc` on PATH and /usr/local/cuda, which it tries otherwise, are the
// machine's, for which the stated toolkit stands. A framework without CUDA builds no CUDA op.
void check_cuda_home(const JobVersions& v) {
  if (v.torch_cuda.empty()) return;
  const char* home = std::getenv("CUDA_HOME");
  if (home == nullptr || *home == '\0') home = std::getenv("CUDA_PATH");
  if (home == nullptr || *home == '\0') return;
  const std::string nvcc = std::string(home) + "/bin/nvcc";
  if (::access(nvcc.c_str(), X_OK) != 0) {
    raise<PluginError>(
        "FileNotFoundError: [Errno 2] No such file or directory: '{}' (DeepSpeed's op builder "
        "runs CUDA_HOME/bin/nvcc -V for the toolkit's release, and the environment's CUDA_HOME "
        "is '{}')",
        nvcc, home);
  }
}

// DeepSpeed checks the toolkit on every JIT load (get_cuda_compile_flag is part of cxx_args),
// before torch looks for a cached build.
void check_toolkit(const JobVersions& v) {
  check_cuda_home(v);
  const char* skip = std::getenv("DS_SKIP_CUDA_CHECK");
  const std::string note = check_cuda_versions(v.cuda_toolkit, v.torch_cuda,
                                               skip != nullptr && std::string(skip) == "1");
  if (!note.empty()) fmt::print(stderr, "{}\n", note);
}

// `import torch` before the extension: the framework's symbols become global, as libtorch's are,
// and the extension's references to them are resolved when it is opened.
void load_framework() {
  const JobVersions v = job_versions();
  if (v.torch.empty()) return;
  const std::string lib = jit_build_framework(v);
  if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    raise<PluginError>("cannot load the framework library {}: {}", lib, ::dlerror());
  }
}

}  // namespace

std::string jit_build_plugin(const std::string& name) {
  check_plugin_name(name);
  const fs::path tree_src = fs::path(kPluginSrc.get()) / (name + ".cpp");
  std::ifstream in(tree_src, std::ios::binary);
  if (!in) {
    raise<PluginError>("cannot build kernel plugin '{}': no source {} (FAULTLINE_PLUGIN_SRC)", name,
                       tree_src.string());
  }
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cxx = cxx_of_env();
  const char* flags_env = std::getenv("CXXFLAGS");
  const std::string flags = flags_env != nullptr ? flags_env : "";
  const std::string archs = kArchList.get();
  const JobVersions ver = job_versions();
  check_toolkit(ver);
  fs::path dir = jit_cache_dir(name);
  // The include root is the directory above kernels/plugins; a packaged install compiles from
  // its own copy of what the manifest kept (plugin_package.hpp).
  fs::path plugins = fs::path(kPluginSrc.get()).lexically_normal();
  if (!plugins.has_filename()) plugins = plugins.parent_path();  // a trailing '/'
  const fs::path tree = plugins.parent_path().parent_path();
  // The framework's glue stands for torch's own headers: it comes with the framework, never with
  // the op package, so it is read from the tree whatever the manifest keeps.
  const fs::path glue = plugins / "framework" / "torch_extension.hpp";
  const PluginPackage pkg =
      plan_package((plugins / (name + ".cpp")).lexically_relative(tree).generic_string(), tree, {},
                   jit_manifest(), dir);
  const fs::path src = pkg.packaged ? pkg.root / pkg.source : tree_src;
  const std::string root = pkg.root.string();
  // Like DeepSpeed's op builder, the instruction set comes from the building CPU unless set; it
  // becomes a compiler flag, so it is part of the cache key (the setting's value, not the CPU:
  // a `native` build is reused by a CPU that differs, as a shared extensions cache is).
  const std::string isa = jit_target_isa();
  // As torch's versioner: the sources and the builder's own flags; not the framework's version
  // or ABI, which torch adds to the command line after keying (kernels/versions.hpp).
  // A package's folder is named by its content, so another manifest is another build.
  const std::string key_src = fmt::format("{}\n{}\n{}\n{}\n{}{}", cxx, flags, archs, kJitIsaKey(),
                                          source, pkg.packaged ? "\n" + root : "");
  const std::string key = fmt::format("{:016x}", XXH64(key_src.data(), key_src.size(), 0));
  std::error_code ec;
  if (!ver.torch.empty()) {
    dir = dir / extensions_folder(ver.python, ver.torch_cuda) / name;
    fs::create_directories(dir, ec);
  }
  const fs::path out = dir / fmt::format("libfl_{}-{}.so", name, key);
  Compile c{name,
            cxx,
            flags,
            src,
            out,
            dir / fmt::format("{}-{}.log", name, key),
            {"-I" + root, fmt::format("-DFL_PLUGIN_ARCHS=\"{}\"", archs),
             fmt::format("-DFL_PLUGIN_ISA=\"{}\"", isa)}};
  const auto lock = FileLock::acquire<PluginError>((dir / (name + ".lock")).string());
  if (fs::exists(out)) return out.string();
  stage_package(pkg, tree);
  if (!ver.torch.empty()) {
    // An earlier job (another framework) built this key first: what this job then finds.
    const bool earlier = !ver.cached_torch.empty();
    auto fw = framework_defines(name, earlier ? ver.cached_torch : ver.torch,
                                earlier ? ver.cached_cxx11_abi : ver.cxx11_abi, glue);
    c.defines.insert(c.defines.end(), fw.begin(), fw.end());
  }
  compile_shared(c);
  return out.string();
}

void load_plugin(const std::string& name, bool jit) {
  check_plugin_name(name);
  // A plan can slow an import down (delay) or make it fail.
  if (FAULTLINE_FAULT_POINT("plugin.load",
                            (fault::SiteContext{-1, "", name, -1, nullptr, 0, DType::kU8, -1})) ==
      fault::Verdict::kFail) {
    raise<PluginError>("cannot load kernel plugin '{}': fault injected at plugin.load", name);
  }
  const std::string file = "libfl_" + name + ".so";
  const std::string path = kPluginPath.get();
  std::string found;
  if (jit) {
    found = jit_build_plugin(name);
    load_framework();
  }
  size_t start = 0;
  while (start <= path.size() && found.empty()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, end - start);
    if (!dir.empty() && fs::exists(fs::path(dir) / file)) {
      found = (fs::path(dir) / file).string();
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
  // Like a CUDA fatbin without an image for the device: the kernels cannot run here.
  if (auto archs_fn = reinterpret_cast<const char* (*)()>(::dlsym(h, "fl_plugin_archs"))) {
    const std::string archs = archs_fn();
    const std::string cap = device_capability();
    const auto list = split(archs, ';');
    if (std::find(list.begin(), list.end(), cap) == list.end()) {
      raise<PluginError>(
          "kernel plugin '{}': no kernel image is available for execution on the device "
          "(device capability {}, plugin built for {}; rebuild it with FAULTLINE_ARCH_LIST "
          "including {})",
          name, cap, archs, cap);
    }
  }
  if (auto isa_fn = reinterpret_cast<const char* (*)()>(::dlsym(h, "fl_plugin_isa"))) {
    note_plugin_isa(name, isa_fn());
  }
  std::lock_guard lock(g_mu);
  // A plugin that installs adamw brings its own length rule: a multiple another plugin declared
  // does not carry over to it (it declares its own after this, or handles any length).
  PluginRegistry mine = g_registry;
  mine.adamw = nullptr;
  mine.adamw_multiple = 1;
  reg(&mine);
  if (mine.adamw != nullptr) {
    g_registry.adamw = mine.adamw;
    g_registry.adamw_multiple = mine.adamw_multiple;
    g_registry.adamw_plugin = name;
  }
  g_registry.gelu_forward = mine.gelu_forward;  // as it was unless the plugin installed one
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
