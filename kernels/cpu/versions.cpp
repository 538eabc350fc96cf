#include "kernels/versions.hpp"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/version.hpp"
#include "kernels/plugin.hpp"

namespace fl::ops {

namespace {

std::mutex g_versions_mu;
JobVersions g_versions;

// DeepSpeed's op_builder/builder.py (cuda_minor_mismatch_ok): pairs inside one list are
// accepted; "There is no CUDATk 12.7", so 12.7 is in no list.
const std::map<int, std::vector<std::string>>& minor_mismatch_ok() {
  static const std::map<int, std::vector<std::string>> ok = {
      {10, {"10.0", "10.1", "10.2"}},
      {11, {"11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"}},
      {12, {"12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"}},
  };
  return ok;
}

bool listed(const std::vector<std::string>& list, const std::string& v) {
  for (const auto& x : list) {
    if (x == v) return true;
  }
  return false;
}

Version parsed(const std::string& text, const char* key) {
  auto v = parse_version(text);
  if (!v) {
    raise<ConfigError>("{}: '{}' is not a version (allowed: {})", key, text, kVersionAllowed);
  }
  return *v;
}

void check_field(const std::string& text, const char* key) {
  if (!text.empty()) parsed(text, key);
}

}  // namespace

void set_job_versions(const JobVersions& v) {
  check_field(v.cuda_toolkit, "workload.versions.cuda_toolkit");
  check_field(v.torch_cuda, "workload.versions.torch_cuda");
  check_field(v.torch, "workload.versions.torch");
  check_field(v.python, "workload.versions.python");
  check_field(v.cached_torch, "workload.versions.cached_extension.torch");
  check_field(v.deepspeed, "workload.versions.deepspeed");
  check_field(v.megatron, "workload.versions.megatron");
  if (!v.cached_torch.empty() && v.torch.empty()) {
    raise<ConfigError>(
        "workload.versions.cached_extension.torch is set but workload.versions.torch is not "
        "(allowed: a cached build only next to the framework the job imports)");
  }
  std::lock_guard lock(g_versions_mu);
  g_versions = v;
}

bool stated_and_older(const std::string& v, int major, int minor, int patch) {
  if (v.empty()) return false;
  const Version x = parsed(v, "a version");
  return std::tie(x.major, x.minor, x.patch) < std::tie(major, minor, patch);
}

JobVersions job_versions() {
  std::lock_guard lock(g_versions_mu);
  return g_versions;
}

std::string check_cuda_versions(const std::string& toolkit, const std::string& torch_cuda,
                                bool skip_check) {
  if (toolkit.empty() || torch_cuda.empty()) return "";
  const Version sys = parsed(toolkit, "workload.versions.cuda_toolkit");
  const std::string sys_version = sys.major_minor();
  const std::string torch_version =
      parsed(torch_cuda, "workload.versions.torch_cuda").major_minor();
  if (sys_version == torch_version) return "";
  const auto it = minor_mismatch_ok().find(sys.major);
  if (it != minor_mismatch_ok().end() && listed(it->second, sys_version) &&
      listed(it->second, torch_version)) {
    return fmt::format(
        "Installed CUDA version {} does not match the version torch was compiled with {} but "
        "since the APIs are compatible, accepting this combination",
        sys_version, torch_cuda);
  }
  if (skip_check) {
    return fmt::format(
        "DeepSpeed Op Builder: Installed CUDA version {} does not match the version torch was "
        "compiled with {}.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this combination of CUDA, but "
        "it may result in unexpected behavior.",
        sys_version, torch_cuda);
  }
  raise<PluginError>(
      ">- DeepSpeed Op Builder: Installed CUDA version {} does not match the version torch was "
      "compiled with {}, unable to compile cuda/cpp extensions without a matching cuda version.",
      sys_version, torch_cuda);
}

std::string extensions_folder(const std::string& python, const std::string& torch_cuda) {
  const Version py = parsed(python, "workload.versions.python");
  std::string cu = "cpu";
  if (!torch_cuda.empty()) {
    cu = "cu" + torch_cuda;
    std::erase(cu, '.');
  }
  return fmt::format("py{}{}_{}", py.major, py.minor, cu);
}

std::string framework_namespace(const std::string& torch) {
  const Version v = parsed(torch, "workload.versions.torch");
  return fmt::format("v{}_{}_{}", v.major, v.minor, v.patch);
}

}  // namespace fl::ops
