// The start-up every worker shares (fl-train, fl-infer, fl-dp-smoke): the CLI11 app whose later
// option wins, `--describe` (settings and fault sites) and `--describe-options` (the scenario
// keys it answers to), the options every GPT worker takes (model and shape, device, kernel
// plugins, artifacts, host budget), and the run itself: world bootstrap with telemetry and the
// fault plan, plugins loaded and artifacts fetched once the world has formed, memory accounting
// per rank, the closing barrier, and every exception turned into its exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/memory.hpp"
#include "kernels/versions.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/model/config.hpp"
#include "workloads/runtime/options.hpp"

namespace fl::worker {

class Runtime {
 public:
  explicit Runtime(const std::string& description);

  CLI::App& app() { return app_; }
  Options& options() { return options_; }

  // workload.model and workload.shape.*: the GPT the worker builds (model_config()).
  void add_model_options();
  // workload.device, plugins, jit, fetch and --host-memory-budget.
  void add_runtime_options();
  // workload.versions.* (called by add_runtime_options).
  void add_version_options();

  // `--describe`, `--describe-options`, then the command line. An exit status when the process
  // should end now (a description printed, --help, a bad option), else nullopt.
  std::optional<int> parse(int argc, char** argv);

  // The chosen model with the shape overrides; `vocab` > 0 overrides the vocabulary.
  model::GptConfig model_config(int vocab = 0) const;
  // --check-layout WORLD (add_model_options; the harness's `validate` asks it before any rank
  // starts): nullopt when not given; else the checks a rank makes of `layout` and `m` before
  // building the model (model::validate) for a world of WORLD ranks, without joining one, and the
  // exit status: 0, or the workers' usage status after the rank's own error line on stderr
  // (`faultline worker error (config): ...`).
  // `more` adds the worker's own checks of the same kind (fl-train: its Trainer's).
  std::optional<int> check_layout(
      const model::GptConfig& m, model::Layout layout,
      const std::function<void(const model::Layout&)>& more = nullptr) const;
  const std::string& model_name() const { return model_; }
  const std::string& device() const { return device_; }

  struct World {
    comm::Bootstrap& b;
    MemoryAccountant& acct;  // the rank's compute device's
  };
  // Bootstraps the world (`config_hash`: ranks that disagree refuse to run), loads the plugins,
  // fetches the artifacts (`on_fetch(name, local path)` for each), sets up memory accounting,
  // runs `body`, then the closing barrier; an exception becomes the worker's exit status.
  using FetchHook = std::function<void(const std::string& name, const std::string& path)>;
  int run(const std::string& config_hash, const FetchHook& on_fetch,
          const std::function<int(World&)>& body);

 private:
  CLI::App app_;
  Options options_{app_};
  std::string model_ = "tiny", device_ = "cpu";
  int d_model_ = 0, layers_ = 0, heads_ = 0, seq_len_ = 0, check_layout_world_ = 0;
  std::vector<std::string> plugins_, fetch_;
  bool jit_ = false, device_from_env_ = false;
  int64_t host_budget_ = -1;
  ops::JobVersions versions_;
};

}  // namespace fl::worker
