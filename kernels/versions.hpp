// The versions a job sees (a scenario's workload.versions) and what the JIT op builder does with
// them, as DeepSpeed's op_builder and torch.utils.cpp_extension do:
// - the toolkit (nvcc's release) must match the CUDA the framework was built with, except for
//   the minor mismatches DeepSpeed accepts (cuda_minor_mismatch_ok), or DS_SKIP_CUDA_CHECK=1;
// - extensions are cached under <extensions root>/py{XY}_cu{XYZ}/<name>/, keyed by the sources
//   and the builder's own flags only: neither the framework's version nor its C++ ABI is in the
//   key, so a build left by a job with another framework is found and loaded, and fails in the
//   dynamic loader with "undefined symbol" (kernels/plugins/framework/).
#pragma once

#include <string>
#include <vector>

namespace fl::ops {

struct JobVersions {
  std::string cuda_toolkit;  // nvcc -V's release ("12.1"); "": not stated
  std::string torch_cuda;    // torch.version.cuda ("12.1"); "": a CPU-only framework
  std::string torch;         // torch.__version__ ("2.1.0"); "": no framework (plugins as before)
  bool cxx11_abi = true;     // torch._C._GLIBCXX_USE_CXX11_ABI
  std::string python = "3.10";
  // An earlier job's build already in the extensions cache: its framework and ABI ("": none).
  std::string cached_torch;
  bool cached_cxx11_abi = true;
  // The process-group backends the framework was built with (gloo, nccl, mpi, ucc; what
  // torch.distributed.is_nccl_available() and friends answer); empty: not stated, every one.
  std::vector<std::string> backends;
  bool libuv = true;  // built with libuv (torch >= 2.4's TCPStore asks for it by default)
  // deepspeed.__version__ ("0.19.3"); "": not stated (the engine behaves as the newest release
  // faultline models).
  std::string deepspeed;
  // Megatron Core's version (megatron.core.__version__, "0.18.0"); "": not stated (the newest
  // behaviour faultline models).
  std::string megatron;
};

// True when `v` (a version set_job_versions accepted) is stated and older than major.minor.patch.
bool stated_and_older(const std::string& v, int major, int minor, int patch);

// Checks every field (a version that does not parse: ConfigError naming `what_key(field)`).
void set_job_versions(const JobVersions& v);
JobVersions job_versions();

// DeepSpeed's assert_no_cuda_mismatch(toolkit vs torch.version.cuda): "" when they agree, the
// note DeepSpeed prints when it accepts a minor mismatch (or skips the check), else throws
// PluginError with DeepSpeed's words. Either version "" : no check (nothing to compare).
std::string check_cuda_versions(const std::string& toolkit, const std::string& torch_cuda,
                                bool skip_check);
// torch's _get_build_directory: "py310_cu121" ("py310_cpu" without CUDA).
std::string extensions_folder(const std::string& python, const std::string& torch_cuda);
// The framework's ABI namespace for its version: "v2_1_0". torch promises no ABI between
// releases (an extension is built for one version), so every release has its own.
std::string framework_namespace(const std::string& torch);

}  // namespace fl::ops
