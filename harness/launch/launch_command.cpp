// The command launcher (workload.kind: command, issue 21): any program as the ranks. Per rank
// (launch: per_rank, the harness starts the command once per rank, as the local launcher does a
// worker) or once (launch: once: one launcher command, e.g. torchrun, starts every rank and is the
// job's process, as mpirun is). The ranks get the local launcher's contract (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR/PORT), torchrun's names for it and the
// probe's file; out-of-process faults adjust each rank's process as they do a worker's. The
// runner reads the probe's files and turns a command that never reports into a harness error
// (run_command.cpp).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/placement.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

// argv[0] as exec will find it with the rank's PATH; "" when it is not an executable file.
std::string find_program(const std::string& name, const std::string& path_env) {
  auto ok = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return ok(name) ? name : "";
  const std::string p = path_env.empty() ? "/usr/bin:/bin" : path_env;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string cand = (end > start ? p.substr(start, end - start) : ".") + "/" + name;
    if (ok(cand)) return cand;
    start = end + 1;
  }
  return "";
}

}  // namespace

std::string command_program_problem(const Scenario& s) {
  if (s.workload.kind != "command" || s.workload.command.empty()) return "";
  // Only what can be known before the run exists: a program named by {source_dir}, {fl_ckpt} or
  // literally.
  std::string why;
  const std::string program = expand_command_arg(
      s.workload.command[0],
      {{"source_dir", this_build::source_dir()}, {"fl_ckpt", this_build::ckpt_bin()}}, &why);
  if (!why.empty() || program.empty()) return "";
  if (program.find('/') != std::string::npos && program[0] != '/') return "";  // the rank's dir
  const auto path = s.env.all.find("PATH");
  const char* own = std::getenv("PATH");
  const std::string path_env = path != s.env.all.end() ? path->second : own ? own : "";
  if (!find_program(program, path_env).empty()) return "";
  std::string shown;
  for (const auto& a : s.workload.command) shown += (shown.empty() ? "" : " ") + a;
  return fmt::format("'{}' is not an executable file (PATH {}); command: {}", program, path_env,
                     shown);
}

namespace {

class CommandLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kCommand; }

  void start(LaunchHost& h, const std::vector<std::string>&) override {
    rank_pids_.clear();
    launcher_pids_.clear();
    launchers_ended_.clear();
    const auto inherited = base_env();
    if (h.s.workload.launch == "once") {
      // One launcher per node, as torchrun runs once per node (--nnodes N --node_rank
      // {node_rank}): each in its node's network namespace when the run has them, so that a
      // network fault between nodes lies between the launchers and their workers too.
      for (int n = 0; n < std::max(1, h.s.topo.nodes); ++n) start_launcher(h, n);
      ++starts_;
      return;
    }
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      auto env = h.rank_env(r);
      add_command_env(h, env);
      env["GROUP_RANK"] = env["NODE_RANK"];
      env["ROLE_RANK"] = env["RANK"];
      env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
      env["FAULTLINE_PROBE_FILE"] = probe_file(h.dir, r);
      // Where torchelastic's @record writes the rank's exception (as torchrun's agent does for
      // each worker); the runner reads it after the job (run_command.cpp).
      env.emplace("TORCHELASTIC_ERROR_FILE", fmt::format("{}/ranks/rank{}/error.json", h.dir, r));
      ProcessSpec p;
      p.name = fmt::format("rank {}", r);
      p.rank = r;
      p.argv = argv(h, r, env);
      p.cwd = fmt::format("{}/ranks/rank{}", h.dir, r);
      h.faults.adjust_rank(r, p, env);
      if (find_program(p.argv[0], env["PATH"]).empty()) {
        raise<Error>(
            "rank {}: workload.command '{}' is not an executable file (PATH {}); command: {}", r,
            p.argv[0], env["PATH"], shown(p.argv));
      }
      for (auto& [k, v] : env) {
        if (!inherited.count(k)) check_env_key(r, k);
        p.env.push_back(k + "=" + v);
      }
      const pid_t pid = h.sup.spawn(p);
      rank_pids_[r] = pid;
      h.started(r);
      h.hist.harness("launch", {{"pid", pid}, {"launcher", "command"}, {"argv", p.argv}}, r);
    }
    ++starts_;
  }

  pid_t rank_pid(int rank) const override {
    auto it = rank_pids_.find(rank);
    return it == rank_pids_.end() ? 0 : it->second;
  }
  std::string job_process_name() const override { return launcher_pids_.empty() ? "" : "launcher"; }
  // The job ends with the last node's launcher: one that ends before the others is a helper's
  // exit in the history (process_exit, with its status), while the ranks wait for the last.
  // Asked twice for the same exit (the probe's check, then the runner): the same answer.
  bool is_job_process(pid_t pid) const override {
    if (std::find(launcher_pids_.begin(), launcher_pids_.end(), pid) == launcher_pids_.end())
      return false;
    launchers_ended_.insert(pid);
    return launchers_ended_.size() == launcher_pids_.size();
  }
  void job_process_ended() override {
    launcher_pids_.clear();
    launchers_ended_.clear();
  }

  // Fail-fast: under launch: once the ranks are the launchers' children, so the launchers go
  // (torchrun's agent may wait minutes for an agent it cannot reach); per rank, each rank's.
  std::vector<int> kill_ranks(Supervisor& sup, const std::set<int>& ranks) override {
    if (launcher_pids_.empty()) return Launcher::kill_ranks(sup, ranks);
    for (const pid_t pid : launcher_pids_) {
      if (launchers_ended_.count(pid)) continue;
      sup.mark_by_harness(pid);
      sup.signal(pid, SIGKILL);
    }
    return {ranks.begin(), ranks.end()};
  }

  void stop(Supervisor& sup) override {
    for (auto& [r, pid] : rank_pids_) {
      sup.mark_by_harness(pid);
      sup.signal(pid, SIGKILL);
    }
    for (const pid_t pid : launcher_pids_) {
      if (launchers_ended_.count(pid)) continue;
      sup.mark_by_harness(pid);
      sup.signal(pid, SIGKILL);
    }
  }

 private:
  // launch: once, node `node`'s launcher: the job's world, master address and port but no RANK
  // (a launcher such as torchrun sets RANK for each rank it starts, and the probe finds the
  // rank's file from FAULTLINE_PROBE_DIR and RANK); the placeholders of the node's first rank.
  void start_launcher(LaunchHost& h, int node) {
    const int first = node * ranks_per_node(h.s.topo.ranks, h.s.topo.nodes);
    auto env = h.rank_env(first);
    for (const char* k : {"RANK", "LOCAL_RANK", "NODE_RANK", "FAULTLINE_EVENTS_FILE",
                          "FAULTLINE_FIRED_LOG", "FAULTLINE_FLIGHT_RECORDER_DIR"}) {
      env.erase(k);
    }
    add_command_env(h, env);
    // torchrun's agent gives each worker a file of its own and copies the first failure's
    // into its own (its main is under @record): this one, named in the launch event.
    env.emplace("TORCHELASTIC_ERROR_FILE",
                node == 0 ? h.dir + "/torchrun_error.json"
                          : fmt::format("{}/torchrun_error.node{}.json", h.dir, node));
    ProcessSpec p;
    p.name = "launcher";
    p.argv = argv(h, first, env);
    p.cwd = h.dir;
    if (find_program(p.argv[0], env["PATH"]).empty()) {
      raise<Error>(
          "ranks 0-{} (workload.launch: once): workload.command '{}' is not an executable "
          "file (PATH {}); command: {}",
          h.s.topo.ranks - 1, p.argv[0], env["PATH"], shown(p.argv));
    }
    if (h.s.topo.nodes > 1 && h.faults.uses_namespaces()) {
      h.faults.adjust_node_helper(node, p, env);
    } else {
      h.faults.adjust_helper(p, env);
    }
    const auto inherited = base_env();
    for (auto& [k, v] : env) {
      if (!inherited.count(k)) check_env_key(0, k);
      p.env.push_back(k + "=" + v);
    }
    const pid_t pid = h.sup.spawn(p);
    launcher_pids_.push_back(pid);
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      if (node_of_rank(h.s.topo, r) != node) continue;
      h.started(r);
      h.hist.harness("launch",
                     {{"pid", pid},
                      {"launcher", "command-once"},
                      {"node", node},
                      {"argv", p.argv},
                      {"error_file", env["TORCHELASTIC_ERROR_FILE"]}},
                     r);
    }
  }

  // What every process of a command workload gets beyond a worker's environment.
  void add_command_env(const LaunchHost& h, std::map<std::string, std::string>& env) const {
    env["TORCHELASTIC_RUN_ID"] = env["FAULTLINE_RUN_ID"];
    env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(starts_);
    env["TORCHELASTIC_MAX_RESTARTS"] = "0";
    env["FAULTLINE_PROBE_DIR"] = h.dir + "/ranks";
    env["FAULTLINE_PROBE_LIB"] = this_build::probe_lib();
    // The probe's Python module (python/faultline_probe) without an install.
    const std::string py = std::string(this_build::source_dir()) + "/python";
    auto it = env.find("PYTHONPATH");
    env["PYTHONPATH"] = it == env.end() || it->second.empty() ? py : py + ":" + it->second;
  }

  static std::vector<std::string> argv(const LaunchHost& h, int rank,
                                       std::map<std::string, std::string>& env) {
    const int per_node = ranks_per_node(h.s.topo.ranks, h.s.topo.nodes);
    const int node = node_of_rank(h.s.topo, rank);  // placement.hpp
    const std::map<std::string, std::string> values = {
        {"rank", std::to_string(rank)},
        {"ranks", std::to_string(h.s.topo.ranks)},
        {"local_rank", std::to_string(rank - node * per_node)},
        {"local_ranks", std::to_string(per_node)},
        {"node_rank", std::to_string(node)},
        {"nodes", std::to_string(h.s.topo.nodes)},
        {"master_addr", env["MASTER_ADDR"]},
        {"master_port", env["MASTER_PORT"]},
        {"run_id", env["FAULTLINE_RUN_ID"]},
        {"run_dir", h.dir},
        {"rank_dir", fmt::format("{}/ranks/rank{}", h.dir, rank)},
        {"source_dir", this_build::source_dir()},
        {"fl_ckpt", this_build::ckpt_bin()}};
    std::vector<std::string> out;
    for (const auto& a : h.s.workload.command) {
      std::string why;
      out.push_back(expand_command_arg(a, values, &why));
      if (!why.empty()) raise<Error>("workload.command: {}", why);
    }
    if (out.empty()) raise<Error>("workload.command is empty");
    return out;
  }

  static std::string shown(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
    return s.size() > 300 ? s.substr(0, 300) + "..." : s;
  }

  std::map<int, pid_t> rank_pids_;
  std::vector<pid_t> launcher_pids_;         // launch: once, one per node
  mutable std::set<pid_t> launchers_ended_;  // of launcher_pids_
  int starts_ = 0;                           // incarnations started: TORCHELASTIC_RESTART_COUNT
};

}  // namespace

const LauncherInfo& command_launcher() {
  static const LauncherInfo info{
      LauncherKind::kCommand,
      "command",
      "workload.kind: command's (set by it: each rank's command, or one launcher command)",
      /*rank_processes=*/true,
      /*aborts_on_rank_failure=*/false,
      [] { return std::make_unique<CommandLauncher>(); }};
  return info;
}

}  // namespace fl::harness
