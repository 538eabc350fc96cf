// The local launcher: the harness forks and execs one process per rank, each with its own
// environment, working directory and process group. With the MPI backend the ranks are MPI
// singletons that find each other through an ompi-server this launcher starts first.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

namespace fs = std::filesystem;

class LocalLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kLocal; }

  void prepare(LaunchHost& h) override {
    mca_ = local_mpi_params(h.s);  // no fabric probing in each rank's MPI_Init
    for (auto& p : singleton_mpi_params(h.s, usable_cpus())) mca_.push_back(p);  // no spinning
    mpi_env_ = local_mpi_env(h.s);  // nor hwloc's I/O discovery
    if (h.s.topo.backend != "mpi" || h.s.topo.ranks <= 1) return;
    // MPI singletons find each other through an ompi-server (see join_singletons).
    const std::string uri = h.dir + "/tmp/ompi-server.uri";
    ProcessSpec p;
    p.name = "ompi-server";
    p.argv = {"ompi-server", "--no-daemonize", "-r", uri};
    p.cwd = h.dir;
    auto env = base_env();
    h.faults.adjust_helper(p, env);
    for (auto& [k, v] : env) p.env.push_back(k + "=" + v);
    p.env.push_back("TMPDIR=" + h.dir + "/tmp");
    p.env.push_back("OMPI_MCA_btl_vader_backing_directory=" + h.dir + "/tmp");
    p.env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    p.env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    ompi_server_ = h.sup.spawn(p);
    uri_ = uri;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!fs::exists(uri) || fs::file_size(uri) == 0) {
      if (std::chrono::steady_clock::now() > until || !h.sup.is_running(ompi_server_)) {
        raise<Error>("ompi-server did not start within 10 s (see {}/helpers.log)", h.dir);
      }
      h.poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void add_env(int, std::map<std::string, std::string>& env) const override {
    if (ompi_server_ != 0) env["OMPI_MCA_pmix_server_uri"] = "file:" + uri_;
    for (const auto& [name, value] : mca_) env["OMPI_MCA_" + name] = value;
    for (const auto& [name, value] : mpi_env_) env[name] = value;
  }

  void start(LaunchHost& h, const std::vector<std::string>& args) override {
    rank_pids_.clear();
    const auto inherited = base_env();
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      auto env = h.rank_env(r);
      ProcessSpec p = rank_spec(h, r, args);
      h.faults.adjust_rank(r, p, env);
      for (auto& [k, v] : env) {
        if (!inherited.count(k)) check_env_key(r, k);  // the scenario's and its faults' keys
        p.env.push_back(k + "=" + v);
      }
      const pid_t pid = h.sup.spawn(p);
      rank_pids_[r] = pid;
      h.started(r);
      h.hist.harness("launch", {{"pid", pid}, {"launcher", "local"}, {"argv", args}}, r);
    }
  }

  // restart_rank: the rank's environment as the run sets it, without the faults' changes to a
  // launch (a relaunched rank rejoins a world already set up).
  pid_t start_rank(LaunchHost& h, int rank, const std::vector<std::string>& args) override {
    ProcessSpec p = rank_spec(h, rank, args);
    for (auto& [k, v] : h.rank_env(rank)) p.env.push_back(k + "=" + v);
    const pid_t pid = h.sup.spawn(p);
    rank_pids_[rank] = pid;
    h.started(rank);
    h.hist.harness("launch", {{"pid", pid}, {"launcher", "local"}, {"restart", true}}, rank);
    return pid;
  }

  pid_t rank_pid(int rank) const override {
    auto it = rank_pids_.find(rank);
    return it == rank_pids_.end() ? 0 : it->second;
  }

  void stop(Supervisor& sup) override {
    for (auto& [r, pid] : rank_pids_) {
      sup.mark_by_harness(pid);
      sup.signal(pid, SIGKILL);
    }
  }

 private:
  static ProcessSpec rank_spec(const LaunchHost& h, int rank,
                               const std::vector<std::string>& args) {
    ProcessSpec p;
    p.name = fmt::format("rank {}", rank);
    p.rank = rank;
    p.argv = args;
    p.cwd = fmt::format("{}/ranks/rank{}", h.dir, rank);
    return p;
  }

  std::map<int, pid_t> rank_pids_;
  std::vector<std::pair<std::string, std::string>> mca_;
  std::vector<std::pair<std::string, std::string>> mpi_env_;
  pid_t ompi_server_ = 0;
  std::string uri_;
};

}  // namespace

const LauncherInfo& local_launcher() {
  static const LauncherInfo info{LauncherKind::kLocal,
                                 "local",
                                 "fork/exec one process per rank",
                                 /*rank_processes=*/true,
                                 /*aborts_on_rank_failure=*/false,
                                 [] { return std::make_unique<LocalLauncher>(); }};
  return info;
}

}  // namespace fl::harness
