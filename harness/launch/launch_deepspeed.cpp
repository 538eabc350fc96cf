// The deepspeed launcher: the job process is fl-ds-runner (DeepSpeed's runner.py + launch.py,
// harness/launch/fl_ds_runner.cpp) with topology.deepspeed's hostfile, --include/--exclude,
// --num_nodes and --num_gpus; the scenario's CUDA_VISIBLE_DEVICES is the runner's own. The runner
// decides which slots run and each one's RANK, LOCAL_RANK and CUDA_VISIBLE_DEVICES; the harness
// gives it each rank's other variables (identity of the run, control plane, plans) in a file,
// RUN_DIR/ds_ranks.jsonl, and every host's processes run on this machine. With the MPI backend
// the ranks are MPI singletons joined through the local launcher's ompi-server. The worker command,
// with every rank's `args` fault, is the runner's user arguments: one for all ranks, as launch.py.
#include <csignal>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

namespace fs = std::filesystem;

// fl-ds-runner sits beside fl-launch in the build.
std::string runner_bin() {
  return (fs::path(this_build::launch_bin()).parent_path() / "fl-ds-runner").string();
}

// The runner's command line: DeepSpeed's flags, as a user would pass them.
std::vector<std::string> runner_argv(const LaunchHost& h, const std::string& hostfile,
                                     const std::vector<std::string>& args) {
  const auto& d = h.s.topo.deepspeed;
  std::vector<std::string> argv = {runner_bin(), "--ranks", h.dir + "/ds_ranks.jsonl"};
  if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
  if (!d.include.empty()) argv.insert(argv.end(), {"--include", d.include});
  if (!d.exclude.empty()) argv.insert(argv.end(), {"--exclude", d.exclude});
  if (d.num_nodes >= 0) argv.insert(argv.end(), {"--num_nodes", std::to_string(d.num_nodes)});
  if (d.num_gpus >= 0) argv.insert(argv.end(), {"--num_gpus", std::to_string(d.num_gpus)});
  if (d.version != "latest") argv.insert(argv.end(), {"--version", d.version});
  // device_count: this machine's devices and every node's; unset, the ranks and each hostfile
  // host's slots.
  const int devices = d.device_count > 0 ? d.device_count : h.s.topo.ranks;
  argv.insert(argv.end(), {"--device-count", std::to_string(devices)});
  if (d.device_count > 0) {
    argv.insert(argv.end(), {"--devices-per-node", std::to_string(d.device_count)});
  }
  argv.push_back("--");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

class DeepspeedLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kDeepspeed; }

  void prepare(LaunchHost& h) override { local_->prepare(h); }
  void add_env(int rank, std::map<std::string, std::string>& env) const override {
    local_->add_env(rank, env);
  }

  void start(LaunchHost& h, const std::vector<std::string>& args) override {
    std::string ranks;
    std::vector<std::string> command;  // every rank's, after the faults (one for all)
    for (int r = 0; r < h.s.topo.ranks; ++r) ranks += rank_line(h, r, args, command) + "\n";
    h.run_dir->write_atomic("ds_ranks.jsonl", ranks);
    std::string hostfile = h.s.topo.deepspeed.hostfile;
    if (!h.s.topo.deepspeed.hostfile_text.empty()) {
      h.run_dir->write_atomic("hostfile", h.s.topo.deepspeed.hostfile_text);
      hostfile = h.dir + "/hostfile";
    }
    ProcessSpec p;
    p.name = "deepspeed";
    p.argv = runner_argv(h, hostfile, command.empty() ? args : command);
    p.cwd = h.dir;
    for (auto& [k, v] : base_env()) p.env.push_back(k + "=" + v);
    // The user's CUDA_VISIBLE_DEVICES is the runner's (runner.main reads and deletes it).
    if (auto it = h.s.env.all.find("CUDA_VISIBLE_DEVICES"); it != h.s.env.all.end()) {
      p.env.push_back("CUDA_VISIBLE_DEVICES=" + it->second);
    }
    p.env.push_back("TMPDIR=" + h.dir + "/tmp");
    p.env.push_back(fmt::format("{}={}", kControlSecretEnv, h.secret));  // never in the file
    runner_ = h.sup.spawn(p);
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      h.started(r);
      h.hist.harness("launch", {{"pid", runner_}, {"launcher", "deepspeed"}, {"argv", p.argv}}, r);
    }
  }

  std::string job_process_name() const override { return "deepspeed"; }
  bool is_job_process(pid_t pid) const override { return pid != 0 && pid == runner_; }
  void job_process_ended() override { runner_ = 0; }

  void stop(Supervisor& sup) override {
    if (runner_ != 0) sup.signal(runner_, SIGTERM);  // the runner kills its ranks
  }

 private:
  // {"cwd", "env"} of rank r: the run's variables and the faults' changes, the secret left out.
  // The faults' command (an `args` fault's arguments) goes to `command`: the runner passes its
  // user arguments to every rank (launch.py), so it must be the same for each.
  static std::string rank_line(LaunchHost& h, int r, const std::vector<std::string>& args,
                               std::vector<std::string>& command) {
    auto env = h.rank_env(r);
    ProcessSpec spec;
    spec.argv = args;
    h.faults.adjust_rank(r, spec, env);
    if (r == 0) command = spec.argv;
    if (spec.argv != command) {
      raise<Error>(
          "launcher deepspeed: rank {}'s command differs from rank 0's (DeepSpeed's runner starts "
          "every rank with one command; a per-rank argument needs launcher local, mpirun or srun)",
          r);
    }
    nlohmann::json vars = nlohmann::json::object();
    const auto inherited = base_env();
    for (auto& [k, v] : env) {
      if (k == kControlSecretEnv) continue;
      if (auto it = inherited.find(k); it != inherited.end() && it->second == v) continue;
      check_env_key(r, k);
      vars[k] = v;
    }
    return nlohmann::json{{"cwd", fmt::format("{}/ranks/rank{}", h.dir, r)}, {"env", vars}}.dump();
  }

  std::unique_ptr<Launcher> local_ = local_launcher().make();
  pid_t runner_ = 0;
};

}  // namespace

const LauncherInfo& deepspeed_launcher() {
  static const LauncherInfo info{LauncherKind::kDeepspeed,
                                 "deepspeed",
                                 "DeepSpeed's runner: hostfile slots, --include/--exclude",
                                 /*rank_processes=*/false,
                                 /*aborts_on_rank_failure=*/true,
                                 [] { return std::make_unique<DeepspeedLauncher>(); }};
  return info;
}

}  // namespace fl::harness
