#include "workloads/runtime/runtime.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/exit_codes.hpp"
#include "base/version.hpp"
#include "injector/describe.hpp"
#include "kernels/device.hpp"
#include "kernels/plugin.hpp"
#include "kernels/versions.hpp"
#include "workloads/comm/default_group.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/rendezvous/artifacts.hpp"

namespace fl::worker {

Runtime::Runtime(const std::string& description) : app_(description) {
  // A later occurrence of an option wins, as with most launchers' argument handling: extra
  // arguments appended to a command override what came before.
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void Runtime::add_model_options() {
  options_.add("workload.model", "--model", model_, "Model size").choices({"tiny", "small"});
  options_.section("workload.shape", "Overrides of the model's shape (0: the model's own)");
  options_.add("workload.shape.d_model", "--d-model", d_model_, "Model width").range(0, 65536);
  options_.add("workload.shape.layers", "--layers", layers_, "Transformer blocks").range(0, 1024);
  options_.add("workload.shape.heads", "--heads", heads_, "Attention heads").range(0, 1024);
  options_
      .add("workload.shape.seq_len", "--seq-len", seq_len_,
           "Context length (inference: prompt_len + new_tokens must fit in it unless "
           "workload.infer.context_limit is clamp or none)")
      .range(0, 65536);
  app_.add_option("--check-layout", check_layout_world_,
                  "Check the layout and model for a world of this many ranks, then exit (0: ok, "
                  "2: the error a rank would stop with); joins no world")
      ->check(CLI::Range(1, 1 << 20));
}

std::optional<int> Runtime::check_layout(
    const model::GptConfig& m, model::Layout layout,
    const std::function<void(const model::Layout&)>& more) const {
  if (check_layout_world_ <= 0) return std::nullopt;
  layout.world = check_layout_world_;
  try {
    model::validate(m, layout);
    if (more) more(layout);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "faultline worker error (config): %s\n", e.what());
    return exit_code::kUsage;
  }
  return 0;
}

void Runtime::add_runtime_options() {
  // Without --device a worker computes where FAULTLINE_DEVICE says (parse()): the harness passes
  // it always, so that a rank's environment cannot change it.
  options_
      .add("workload.device", "--device", device_,
           "Where ranks compute: cpu, or cuda (each rank's GPU, chosen by FAULTLINE_GPU_MAP in "
           "env; a run refuses to start where no CUDA device is visible)")
      .choices({"cpu", "cuda"})
      .always();
  device_from_env_ = true;
  options_.add("workload.plugins", "--plugin", plugins_,
               "Kernel plugins every rank loads at start (libfl_NAME.so; e.g. fused_adamw)");
  options_.add_flag("workload.jit", "--plugin-jit", jit_,
                    "Build the plugins from source at start with the compiler named by CXX (like "
                    "a JIT op builder); one rank builds under a lock, the others reuse it");
  options_.add("workload.fetch", "--fetch", fetch_,
               "Artifacts every rank downloads at start from the run's HTTP hub into its node's "
               "cache (tokenizer.json: the data pipeline's vocabulary)");
  add_version_options();
  app_.add_option("--host-memory-budget", host_budget_,
                  "Host memory budget in bytes for offloaded state (default "
                  "FAULTLINE_HOST_MEMORY_BUDGET_BYTES; 0: unlimited)");
}

// The versions the job sees (docs/workloads.md#versions): what the JIT op builder checks and
// how it finds a cached build. Declared for every worker: a job imports one framework.
void Runtime::add_version_options() {
  auto& v = versions_;
  options_.section("workload.versions",
                   "The versions the job sees (JIT-built plugins act on them as DeepSpeed's op "
                   "builder and torch.utils.cpp_extension do); empty: not stated");
  options_
      .add("workload.versions.cuda_toolkit", "--cuda-toolkit-version", v.cuda_toolkit,
           "The CUDA toolkit that compiles extensions (nvcc -V's release, e.g. 12.1)")
      .version();
  options_
      .add("workload.versions.torch_cuda", "--torch-cuda-version", v.torch_cuda,
           "The CUDA the framework was built with (torch.version.cuda); empty: a CPU-only build")
      .version();
  options_
      .add("workload.versions.torch", "--torch-version", v.torch,
           "The framework's version (torch.__version__); set, JIT-built plugins link against "
           "it and are cached under py{XY}_cu{XYZ}/NAME/ as torch's extensions are")
      .version();
  options_.add("workload.versions.cxx11_abi", "--torch-cxx11-abi", v.cxx11_abi,
               "The framework's C++ ABI (torch._C._GLIBCXX_USE_CXX11_ABI)");
  options_
      .add("workload.versions.python", "--python-version", v.python,
           "The interpreter's version (the py{XY} of the extensions folder)")
      .version();
  options_.section("workload.versions.cached_extension",
                   "A build an earlier job left in the extensions cache (same sources and "
                   "flags, so the same key): the framework it was compiled against");
  options_
      .add("workload.versions.cached_extension.torch", "--cached-extension-torch-version",
           v.cached_torch, "Its framework version (empty: the cache is empty)")
      .version();
  options_.add("workload.versions.cached_extension.cxx11_abi", "--cached-extension-cxx11-abi",
               v.cached_cxx11_abi, "Its framework's C++ ABI");
  options_
      .add("workload.versions.backends", "--torch-backends", v.backends,
           "The process-group backends the framework was built with (gloo, nccl, mpi, ucc; "
           "Windows and NPU builds of torch have no nccl); a job whose data plane is missing "
           "stops at init with torch's error. Empty: not stated (every backend)")
      .choices({"gloo", "nccl", "mpi", "ucc"});
  options_
      .add("workload.versions.deepspeed", "--deepspeed-version", v.deepspeed,
           "DeepSpeed's version (deepspeed.__version__); behaviours a release changed follow it "
           "(docs/workloads.md#versions). Empty: not stated, the newest behaviour")
      .version();
  options_
      .add("workload.versions.megatron", "--megatron-version", v.megatron,
           "Megatron Core's version (megatron.core.__version__); behaviours a release changed "
           "follow it (docs/workloads.md#versions). Empty: not stated, the newest behaviour")
      .version();
  options_.add("workload.versions.libuv", "--torch-libuv", v.libuv,
               "The framework was built with libuv (false: torch's Windows wheels). torch 2.4 to "
               "2.6 create the rendezvous store with libuv unless USE_LIBUV is not 1, and a "
               "build without it stops there; from 2.7 only USE_LIBUV=1 asks for it");
}

namespace {

// What init_process_group checks of the framework's build: the rendezvous store first, which
// torch 2.4 to 2.6 creates with libuv unless the environment's USE_LIBUV says otherwise (torch
// reads it as USE_LIBUV == "1", default "1"; pull request 148266, taken as 2.7, made the default
// "0" on Windows, whose wheels are the builds without libuv), then, with the world's store up,
// the default group's backend. Here both come before the world forms. The CPU data plane (mpi)
// stands for the group a CPU job asks for, gloo or mpi; nccl is nccl.
void check_framework_build(const ops::JobVersions& v, const std::string& data_plane) {
  const auto torch = parse_version(v.torch);
  const auto at_least = [&](int major, int minor) {
    return torch && (torch->major > major || (torch->major == major && torch->minor >= minor));
  };
  const char* use_libuv = std::getenv("USE_LIBUV");
  const bool libuv_asked =
      at_least(2, 4) && (use_libuv != nullptr ? std::string(use_libuv) == "1" : !at_least(2, 7));
  if (!v.libuv && libuv_asked) {
    raise(
        "RuntimeError: use_libuv was requested but PyTorch was build without libuv support "
        "(torch {} creates the rendezvous TCPStore with libuv unless USE_LIBUV=0; "
        "workload.versions.libuv says this build has none)",
        v.torch);
  }
  if (v.backends.empty()) return;
  auto built = [&](const char* b) {
    return std::find(v.backends.begin(), v.backends.end(), b) != v.backends.end();
  };
  const bool nccl = data_plane == "nccl";
  if (nccl ? built("nccl") : (built("gloo") || built("mpi"))) return;
  // torch's words for NCCL (and MPI); it has no such check for gloo, so that one is faultline's.
  raise(
      "RuntimeError: Distributed package doesn't have {} built in (the job's process group "
      "asks for {}; workload.versions.backends: the framework was built with {})",
      nccl ? "NCCL" : "Gloo", nccl ? "nccl" : "gloo", fmt::join(v.backends, ", "));
}

}  // namespace

std::optional<int> Runtime::parse(int argc, char** argv) {
  // The harness asks for this worker's settings and fault sites (`faultline settings/sites`),
  // and the build for its options (the scenario schema's workload keys).
  if (fault::describe_if_asked(argc, argv)) return 0;
  if (options_.describe_if_asked(argc, argv)) return 0;
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is CLI11's exit 0; a bad command line is the workers' usage error (exit 2).
    return app_.exit(e) == 0 ? 0 : exit_code::kUsage;
  }
  if (device_from_env_ && app_.count("--device") == 0) device_ = kComputeDevice.get();
  return std::nullopt;
}

model::GptConfig Runtime::model_config(int vocab) const {
  auto cfg = model_ == "small" ? model::GptConfig::small() : model::GptConfig::tiny();
  if (vocab > 0) cfg.vocab = vocab;
  if (d_model_ > 0) cfg.d_model = d_model_;
  if (layers_ > 0) cfg.layers = layers_;
  if (heads_ > 0) cfg.heads = heads_;
  if (seq_len_ > 0) cfg.seq_len = seq_len_;
  return cfg;
}

int Runtime::run(const std::string& config_hash, const FetchHook& on_fetch,
                 const std::function<int(World&)>& body) {
  return comm::run_worker_main([&]() -> int {
    check_framework_build(versions_, comm::kBackend.get());
    auto b = comm::bootstrap_worker(config_hash, comm::kBackend.get(), device_);
    // Plugins load once the world has formed (as DeepSpeed loads its fused ops): a rank that
    // cannot load one ends, the others wait for it in a collective.
    ops::set_job_versions(versions_);
    for (auto& p : plugins_) ops::load_plugin(p, jit_);
    for (auto& f : fetch_) {
      const std::string path = rdzv::fetch_artifact(f);
      if (on_fetch) on_fetch(f, path);
    }
    MemoryAccountant::cpu().set_rank(b.comm->rank());
    MemoryAccountant::host().set_rank(b.comm->rank());
    if (host_budget_ >= 0) MemoryAccountant::host().set_budget(static_cast<size_t>(host_budget_));
    MemoryAccountant& acct = MemoryAccountant::of(b.compute);
    acct.set_rank(b.comm->rank());
    World w{b, acct};
    // dist.is_initialized() for the job's helpers, until the world goes.
    comm::set_default_group(b.comm.get());
    struct Clear {
      ~Clear() { comm::set_default_group(nullptr); }
    } clear;
    const int rc = body(w);
    comm::finish_worker(b);
    return rc;
  });
}

}  // namespace fl::worker
