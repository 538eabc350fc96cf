// The local launcher: the harness forks and execs one process per rank, each with its own
// environment, working directory and process group. With the MPI backend the ranks form their
// world one of two ways (the launch events' `mpi_start`):
// - pmix: the harness is the ranks' PMIx server (direct launch, as srun --mpi=pmix): one
//   namespace with every rank, so each rank's MPI_Init gives the whole MPI_COMM_WORLD at once,
//   with no orted per rank and no ompi-server (pmix_server.hpp); ranks in network namespaces
//   reach the server through a relay in the run's hub namespace (netns_relay.hpp). Every world of
//   2 ranks or more since stop 72 (above 8 before);
// - singleton: worlds whose ranks the harness does not fork itself (the DeepSpeed launcher's
//   runner starts them), cannot reach the server, or may be started again one by one, and any
//   world under FAULTLINE_MPI_START=singleton, start MPI singletons that find each other through
//   an ompi-server this launcher starts first and join by connect/accept
//   (workloads/comm/singleton_join.hpp).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/launch/netns_relay.hpp"
#include "harness/launch/pmix_server.hpp"
#include "harness/launch/tools.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

namespace fs = std::filesystem;

// How the ranks of this run's MPI world start, and why: "pmix" or "singleton" ("" for no MPI
// world). A singleton start forks an orted in each rank's MPI_Init and an ompi-server for the
// run: on 2 cores that was a third of a 2-rank run's CPU time and 45% of a 4-rank run's (stop 72;
// the smoke suite's 86 runs took 35% less CPU direct-launched), so every world the harness forks
// is direct-launched unless something needs singletons. A rank started again on its own
// (restart_rank) cannot join a world that started whole, so a run whose recovery tool is a
// program of its own (which may restart ranks one by one) keeps singletons, as does one under
// FAULTLINE_MPI_START=singleton (a person or tool that will restart_rank by hand); restart_job and
// shrink start every rank again, a new namespace each.
std::pair<std::string, std::string> mpi_start_of(const LaunchHost& h) {
  if (h.s.topo.backend != "mpi" || h.s.topo.ranks <= 1) return {"", ""};
  if (h.s.topo.launcher == "deepspeed") {
    return {"singleton",
            "the DeepSpeed launcher's runner starts the ranks: only ranks the harness forks can "
            "be its PMIx server's"};
  }
  const std::string how = kMpiStart.get();
  if (how != "auto" && how != "singleton") {
    raise<ConfigError>("FAULTLINE_MPI_START={}: allowed: auto, singleton", how);
  }
  if (how == "singleton") return {"singleton", "FAULTLINE_MPI_START=singleton"};
  const bool netns = h.s.topo.network != "host" || h.faults.uses_namespaces();
  if (netns && h.faults.hub_netns().empty()) {
    return {"singleton",
            "ranks in network namespaces without a hub: PMIx's clients reach the harness over "
            "its loopback, which a rank in a network namespace cannot"};
  }
  for (const auto& f : h.s.faults.oop) {
    if (f->kind == "launcher") {
      return {"singleton",
              "a launcher fault starts ranks through fl-launch, which may start several "
              "processes per launch (they would claim one PMIx rank)"};
    }
  }
  const std::string tool = h.recovery.substr(0, h.recovery.find(' '));
  const auto& policies = recovery_policies();
  if (!tool.empty() && std::find(policies.begin(), policies.end(), tool) == policies.end()) {
    return {"singleton", "recovery '" + h.recovery +
                             "' may restart ranks one by one (restart_rank), which cannot join a "
                             "world started whole"};
  }
  if (netns) {
    return {"pmix", fmt::format("{} ranks, in network namespaces: the server through a relay at {} "
                                "in the run's hub",
                                h.s.topo.ranks, h.faults.hub_addr())};
  }
  return {"pmix", fmt::format("{} ranks, started whole by the harness", h.s.topo.ranks)};
}

// Ranks in network namespaces direct-launched: all on one PMIx node, so Open MPI would take
// shared memory (vader) between ranks of different namespaces, around the network a fault cuts;
// TCP only (over the nodes' addresses) keeps every message on the network, as singletons have it.
void netns_btl(std::vector<std::pair<std::string, std::string>>& mca) {
  for (auto& [name, value] : mca) {
    if (name == "btl") value = "self,tcp";  // (absent: the scenario set OMPI_MCA_btl itself)
  }
}

class LocalLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kLocal; }

  void prepare(LaunchHost& h) override {
    mca_ = local_mpi_params(h.s);  // no fabric probing in each rank's MPI_Init
    for (auto& p : singleton_mpi_params(h.s, usable_cpus())) mca_.push_back(p);  // no spinning
    mpi_env_ = local_mpi_env(h.s);  // nor hwloc's I/O discovery
    std::tie(mpi_start_, mpi_start_why_) = mpi_start_of(h);
    if (mpi_start_ == "pmix") {
      pmix_ = &PmixServer::in_process(h.dir + "/tmp");
      hub_netns_ = h.faults.hub_netns();
      hub_addr_ = h.faults.hub_addr();
      if (!hub_netns_.empty()) netns_btl(mca_);
      return;
    }
    if (mpi_start_ != "singleton") return;
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

  ~LocalLauncher() override {
    try {
      if (pmix_ != nullptr && !nspace_.empty()) pmix_->deregister_job(nspace_);
    } catch (const std::exception&) {
      // The server outlives the run; a namespace it keeps holds no process.
    }
  }

  void start(LaunchHost& h, const std::vector<std::string>& args) override {
    rank_pids_.clear();
    if (pmix_ != nullptr) register_world(h.s.topo.ranks);
    const auto inherited = base_env();
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      auto env = h.rank_env(r);
      ProcessSpec p = rank_spec(h, r, args);
      h.faults.adjust_rank(r, p, env);
      for (auto& [k, v] : env) {
        if (!inherited.count(k)) check_env_key(r, k);  // the scenario's and its faults' keys
      }
      if (pmix_ != nullptr) add_pmix_env(r, h.dir + "/tmp", env);
      for (auto& [k, v] : env) p.env.push_back(k + "=" + v);
      const pid_t pid = h.sup.spawn(p);
      rank_pids_[r] = pid;
      h.started(r);
      nlohmann::json ev = {{"pid", pid}, {"launcher", "local"}, {"argv", args}};
      if (!mpi_start_.empty()) ev["mpi_start"] = mpi_start_, ev["mpi_start_why"] = mpi_start_why_;
      h.hist.harness("launch", ev, r);
    }
  }

  // restart_rank: the rank's environment as the run sets it, without the faults' changes to a
  // launch (a relaunched rank rejoins a world already set up).
  pid_t start_rank(LaunchHost& h, int rank, const std::vector<std::string>& args) override {
    if (pmix_ != nullptr) {
      raise<Error>(
          "rank {} started with its whole MPI world at once (mpi_start pmix: {}); a rank "
          "started again on its own cannot join it (restart_job starts them all; a run whose "
          "recovery tool is a program of its own, or one under FAULTLINE_MPI_START=singleton, "
          "starts MPI singletons)",
          rank, mpi_start_why_);
    }
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

  // One namespace per incarnation (restart_job, shrink: a new world, maybe of another size).
  void register_world(int ranks) {
    static std::atomic<int> jobs{0};  // unique in the process: one server serves every run
    if (!nspace_.empty()) pmix_->deregister_job(nspace_);
    nspace_.clear();
    // The server listens on loopback TCP, where PMIx 4.2's native security takes a client's
    // word for its uid: an unguessable namespace (it reaches only the ranks' environments,
    // which other users cannot read) keeps another local user from claiming a rank's place.
    const std::string ns =
        fmt::format("faultline.{}.{}", make_control_secret().substr(0, 32), ++jobs);
    pmix_->register_job(ns, ranks);
    nspace_ = ns;
  }

  // A rank in a network namespace reaches the server through the relay in the run's hub: each
  // of the server's URIs ("NSPACE.RANK;tcp4://127.0.0.1:PORT") points there instead.
  void through_relay(std::map<std::string, std::string>& env) {
    const std::string loopback = "tcp4://127.0.0.1:";
    for (auto& [k, v] : env) {
      if (k.rfind("PMIX_SERVER_URI", 0) != 0) continue;
      const auto at = v.find(loopback);
      if (at == std::string::npos) {
        raise<Error>("PMIx server: {}='{}' is not a loopback TCP address the relay can serve", k,
                     v);
      }
      const auto port = static_cast<uint16_t>(std::stoi(v.substr(at + loopback.size())));
      if (!relay_) relay_ = std::make_unique<NetnsRelay>(hub_netns_, hub_addr_, port);
      if (relay_to_ != 0 && relay_to_ != port) {
        raise<Error>("PMIx server: {} names port {}, the relay serves {}", k, port, relay_to_);
      }
      relay_to_ = port;
      v = fmt::format("{}tcp4://{}:{}", v.substr(0, at), hub_addr_, relay_->port());
    }
  }

  // What rank `r` connects to the server with. Open MPI 4.1 takes a PMIx server's direct launch
  // (its `ess pmi`) only where it recognises a resource manager's variable: Slurm's also switch
  // on its Slurm components and Flux's its own PMI library; IBM JSM's JSM_JSRUN_PORT (jsrun is a
  // PMIx server too) selects `ess pmi` and leaves binding to the launcher, nothing else.
  void add_pmix_env(int r, const std::string& tmp, std::map<std::string, std::string>& env) {
    auto penv = pmix_->rank_env(nspace_, r);
    if (!hub_netns_.empty()) through_relay(penv);
    for (auto& [k, v] : penv) env[k] = v;
    env["JSM_JSRUN_PORT"] = "0";
    // The server's own tmpdir is the first run's of this process (gone when that run ended).
    env["PMIX_SERVER_TMPDIR"] = env["PMIX_SYSTEM_TMPDIR"] = tmp;
  }

  std::map<int, pid_t> rank_pids_;
  std::string mpi_start_, mpi_start_why_;
  PmixServer* pmix_ = nullptr;         // mpi_start pmix: the process's server
  std::string nspace_;                 // the current incarnation's namespace
  std::string hub_netns_, hub_addr_;   // ranks in network namespaces: the run's hub
  std::unique_ptr<NetnsRelay> relay_;  // ... and the server's relay there (made on first use)
  uint16_t relay_to_ = 0;              // ... to the server's loopback port
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
