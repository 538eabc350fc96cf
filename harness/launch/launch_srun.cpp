// The srun launcher: inside a Slurm allocation, one `srun` job step starts every rank from a
// multi-program file (one line per rank: `env -C RANK_DIR VAR=value ... worker args`, so each
// keeps its own environment and directory, as mpirun's app file does). MPI worlds come from
// Slurm's PMIx (`--mpi=pmix`); `--kill-on-bad-exit` ends the step when a rank fails, as mpirun
// does. `--label` prefixes every output line with its task, which is the rank. srun's environment
// carries Open MPI's settings for the allocation (srun_mpi_env: one machine's, and yielding when
// a node has more ranks than CPUs).
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/launch/slurm_alloc.hpp"
#include "harness/model/placement.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

namespace fs = std::filesystem;

class SrunLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kSrun; }

  // Before any rank starts: a Slurm to run in, and an allocation the ranks (and
  // topology.hosts) fit; the node of each host (the runner checked the same before anything
  // started: slurm_alloc.hpp).
  void prepare(LaunchHost& h) override {
    alloc_ = check_srun_allocation(h.s);
    if (!h.s.topo.hosts.empty() && h.s.topo.host_addrs[0].empty()) {
      master_ = node_address(alloc_.host_nodes[0]);
    }
  }

  // With logical hosts, rank 0's store is on host 0's node.
  void add_env(int, std::map<std::string, std::string>& env) const override {
    if (!master_.empty()) env["MASTER_ADDR"] = master_;
  }

  void start(LaunchHost& h, const std::vector<std::string>& args) override {
    std::vector<std::string> lines;
    for (int r = 0; r < h.s.topo.ranks; ++r) lines.push_back(line(h, r, args));
    h.run_dir->write_atomic("multiprog", srun_multi_prog(lines));
    ProcessSpec p;
    p.name = "srun";
    p.argv = {"srun",
              "--ntasks=" + std::to_string(h.s.topo.ranks),
              "--mpi=pmix",
              "--kill-on-bad-exit=1",
              "--label",
              "--overcommit",
              "--job-name=faultline-ranks",
              "--multi-prog",
              h.dir + "/multiprog"};
    p.cwd = h.dir;
    auto env = base_env();
    // Inherited by every rank (srun passes its environment on; a line carries only what differs).
    nlohmann::json mpi = nlohmann::json::object();
    for (const auto& [k, v] : srun_mpi_env(h.s, alloc_, usable_cpus())) {
      env[k] = v;
      mpi[k] = v;
    }
    for (auto& [k, v] : env) p.env.push_back(k + "=" + v);
    if (!h.s.topo.hosts.empty()) {
      // topology.hosts: rank r on its host's node (ranks fill the hosts in order), through
      // srun's arbitrary distribution, which reads one node a task from SLURM_HOSTFILE.
      std::string placed;
      for (int r = 0; r < h.s.topo.ranks; ++r) {
        placed += alloc_.host_nodes.at(static_cast<size_t>(host_of_rank(h.s.topo, r))) + "\n";
      }
      h.run_dir->write_atomic("ranks.hosts", placed);
      p.argv.insert(p.argv.begin() + 1, "--distribution=arbitrary");
      p.env.push_back("SLURM_HOSTFILE=" + h.dir + "/ranks.hosts");
    }
    p.env.push_back("TMPDIR=" + h.dir + "/tmp");
    p.env.push_back("OMPI_MCA_btl_vader_backing_directory=" + h.dir + "/tmp");
    p.env.push_back(fmt::format("{}={}", kControlSecretEnv, h.secret));  // never in the file
    p.label_output = true;
    srun_ = h.sup.spawn(p);
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      h.started(r);
      h.hist.harness("launch",
                     {{"pid", srun_}, {"launcher", "srun"}, {"argv", args}, {"mpi_env", mpi}}, r);
    }
  }

  std::string job_process_name() const override { return "srun"; }
  bool is_job_process(pid_t pid) const override { return pid != 0 && pid == srun_; }
  void job_process_ended() override { srun_ = 0; }

  void stop(Supervisor& sup) override {
    // srun passes SIGTERM on to the step's tasks and cancels it; SIGKILL would leave the step.
    if (srun_ != 0) sup.signal(srun_, SIGTERM);
  }

 private:
  // `env -C DIR VAR=value ... worker args` (srun_multi_prog adds the task column): srun reads the
  // file itself (no shell), so values are checked as for mpirun's app file.
  static std::string line(LaunchHost& h, int r, const std::vector<std::string>& args) {
    auto env = h.rank_env(r);
    ProcessSpec spec;
    spec.argv = args;
    std::vector<std::string> unset;
    h.faults.adjust_rank(r, spec, env, &unset);
    std::string out = fmt::format("env -C {}/ranks/rank{}", h.dir, r);
    for (auto& k : unset) {
      check_env_key(r, k);
      out += " -u " + k;
    }
    const auto inherited = base_env();
    for (auto& [k, v] : env) {
      if (k == kControlSecretEnv) continue;
      if (auto it = inherited.find(k); it != inherited.end() && it->second == v) continue;
      check_env_key(r, k);
      if (v.find_first_of(" \t\n\"'\\") != std::string::npos || v.empty()) {
        raise<Error>(
            "launcher srun: rank {} variable {}='{}' has whitespace, quotes or is empty (a "
            "multi-program file cannot carry it; use launcher: local)",
            r, k, v);
      }
      out += fmt::format(" {}={}", k, v);
    }
    for (auto& a : spec.argv) out += " " + a;
    return out;
  }

  pid_t srun_ = 0;
  SlurmAllocation alloc_;
  std::string master_;
};

}  // namespace

const LauncherInfo& srun_launcher() {
  static const LauncherInfo info{LauncherKind::kSrun,
                                 "srun",
                                 "a Slurm job step inside the allocation",
                                 /*rank_processes=*/false,
                                 /*aborts_on_rank_failure=*/true,
                                 [] { return std::make_unique<SrunLauncher>(); }};
  return info;
}

}  // namespace fl::harness
