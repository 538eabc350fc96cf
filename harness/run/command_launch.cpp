// workload.kind: command (issue 21): any program under the harness. Per rank (the harness starts
// the command once per rank) or once (one launcher command, e.g. torchrun, starts every rank).
// The ranks get the usual contract (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
// MASTER_ADDR/PORT), torchrun's names for it, and the probe's file; out-of-process faults adjust
// each rank's process as they do a worker's. A command that is not there, ends before it reports
// anything, or never reports, is a harness error naming the rank and the command.
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/run/launch_args.hpp"
#include "harness/run/probe_ingest.hpp"
#include "harness/run/run.hpp"

namespace fl::harness::detail {

namespace {

std::string shown_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// argv[0] as exec will find it with the rank's PATH; "" when it is not an executable file.
std::string find_program(const std::string& name, const std::string& path_env) {
  auto ok = [](const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return ok(name) ? name : "";
  size_t start = 0;
  const std::string p = path_env.empty() ? "/usr/bin:/bin" : path_env;
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

std::vector<std::string> Run::command_argv(int rank, const std::string& master_addr) {
  const int per_node = s_.ranks / s_.nodes;
  const int r = std::max(rank, 0);
  const std::map<std::string, std::string> values = {
      {"rank", std::to_string(r)},
      {"ranks", std::to_string(s_.ranks)},
      {"local_rank", std::to_string(r % per_node)},
      {"local_ranks", std::to_string(per_node)},
      {"node_rank", std::to_string(r / per_node)},
      {"nodes", std::to_string(s_.nodes)},
      {"master_addr", master_addr},
      {"master_port", std::to_string(master_port_)},
      {"run_id", id_},
      {"run_dir", dir_},
      {"rank_dir", fmt::format("{}/ranks/rank{}", dir_, r)},
      {"source_dir", FAULTLINE_SOURCE_DIR}};
  std::vector<std::string> argv;
  for (const auto& a : s_.command) {
    std::string why;
    argv.push_back(expand_command_arg(a, values, &why));
    if (!why.empty()) raise<Error>("workload.command: {}", why);
  }
  return argv;
}

// What every process of a command workload gets beyond a worker's environment.
void Run::command_env(std::map<std::string, std::string>& env) {
  env["TORCHELASTIC_RUN_ID"] = id_;
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restarts_);
  env["TORCHELASTIC_MAX_RESTARTS"] = "0";
  env["FAULTLINE_PROBE_DIR"] = dir_ + "/ranks";
  env["FAULTLINE_PROBE_LIB"] = FAULTLINE_PROBE_LIB;
  // The probe's Python module (python/faultline_probe) without an install.
  const std::string py = std::string(FAULTLINE_SOURCE_DIR) + "/python";
  auto it = env.find("PYTHONPATH");
  env["PYTHONPATH"] = it == env.end() || it->second.empty() ? py : py + ":" + it->second;
}

void Run::launch_command() {
  if (!probe_) {
    probe_ = std::make_unique<ProbeIngest>(dir_, s_.ranks);
    hist_->add_listener([this](const HistoryEvent& e) {
      if (e.source != "rank") return;
      std::lock_guard lock(step_mu_);
      reported_.insert(e.rank);
    });
  }
  {
    std::lock_guard lock(step_mu_);
    reported_.clear();
  }
  launched_ns_ = hist_->now_ns();
  const auto inherited = base_env();
  if (s_.launch == "once") {
    // One launcher process: it is given the job's contract (torchrun reads MASTER_ADDR/PORT and
    // the world from its options) and starts the ranks itself; they find their probe file from
    // RANK, which the launcher sets, under FAULTLINE_PROBE_DIR.
    auto env = rank_env(0);
    for (const char* k : {"RANK", "LOCAL_RANK", "NODE_RANK", "FAULTLINE_EVENTS_FILE",
                          "FAULTLINE_FIRED_LOG", "FAULTLINE_FLIGHT_RECORDER_DIR"}) {
      env.erase(k);
    }
    command_env(env);
    ProcessSpec p;
    p.name = "launcher";
    p.argv = command_argv(0, env["MASTER_ADDR"]);
    p.cwd = dir_;
    if (find_program(p.argv[0], env["PATH"]).empty()) {
      raise<Error>("workload.command (launch: once, ranks 0-{}): '{}' is not an executable file "
                   "(PATH {}); command: {}",
                   s_.ranks - 1, p.argv[0], env["PATH"], shown_command(p.argv));
    }
    faults_->adjust_helper(p, env);
    for (auto& [k, v] : env) {
      if (!inherited.count(k)) check_env_key(0, k);
      p.env.push_back(k + "=" + v);
    }
    mpirun_ = sup_->spawn(p);  // ends like mpirun: ranks without an exit event end with it
    command_argv_[-1] = p.argv;
    for (int r = 0; r < s_.ranks; ++r) {
      running_ranks_.insert(r);
      hist_->harness("launch", {{"pid", mpirun_}, {"launcher", "command-once"}, {"argv", p.argv}},
                     r);
    }
    return;
  }
  for (int r = 0; r < s_.ranks; ++r) {
    auto env = rank_env(r);
    command_env(env);
    env["GROUP_RANK"] = env["NODE_RANK"];
    env["ROLE_RANK"] = env["RANK"];
    env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
    env["FAULTLINE_PROBE_FILE"] = probe_file(dir_, r);
    ProcessSpec p;
    p.name = fmt::format("rank {}", r);
    p.rank = r;
    p.argv = command_argv(r, env["MASTER_ADDR"]);
    p.cwd = fmt::format("{}/ranks/rank{}", dir_, r);
    faults_->adjust_rank(r, p, env);
    if (find_program(p.argv[0], env["PATH"]).empty()) {
      raise<Error>("rank {}: workload.command '{}' is not an executable file (PATH {}); command: "
                   "{}",
                   r, p.argv[0], env["PATH"], shown_command(p.argv));
    }
    for (auto& [k, v] : env) {
      if (!inherited.count(k)) check_env_key(r, k);
      p.env.push_back(k + "=" + v);
    }
    const pid_t pid = sup_->spawn(p);
    command_argv_[r] = p.argv;
    rank_pids_[r] = pid;
    running_ranks_.insert(r);
    hist_->harness("launch", {{"pid", pid}, {"launcher", "command"}, {"argv", p.argv}}, r);
  }
}

bool Run::rank_reported(int rank) {
  if (probe_) probe_->poll(*hist_);
  std::lock_guard lock(step_mu_);
  return reported_.count(rank) > 0;
}

// A rank of a probed command that ended before its first event: the command is wrong (not the
// job it should be, a missing module, a bad option), not a symptom of the scenario's fault.
void Run::check_command_exit(const ExitInfo& x) {
  if (s_.kind != "command" || !s_.probe || stopping_ || x.by_harness) return;
  const bool launcher = s_.launch == "once" && x.pid == mpirun_;
  if (!launcher && x.rank < 0) return;
  if (launcher) {
    for (int r = 0; r < s_.ranks; ++r) {
      if (rank_reported(r)) return;  // the launcher started the job: its end is the job's
    }
  } else if (rank_reported(x.rank)) {
    return;
  }
  const auto& argv = command_argv_[launcher ? -1 : x.rank];
  const std::string how = x.signaled ? fmt::format("was killed by {}", signal_name(x.code))
                                     : fmt::format("exited with status {}", x.code);
  const auto last = last_line_.find(launcher ? -1 : x.rank);
  raise<Error>(
      "{}: workload.command {} {:.1f} s after launch before it reported anything through the "
      "probe (FAULTLINE_PROBE_FILE; set workload.probe: false for a job without it); command: "
      "{}{}; see {}",
      launcher ? fmt::format("ranks 0-{} (launch: once)", s_.ranks - 1)
               : fmt::format("rank {}", x.rank),
      how, static_cast<double>(hist_->now_ns() - launched_ns_) / 1e9, shown_command(argv),
      last == last_line_.end() ? "" : "; its last output: " + last->second.substr(0, 300),
      launcher ? dir_ + "/helpers.log" : fmt::format("{}/ranks/rank{}/output.log", dir_, x.rank));
}

// Every tick: new probe lines into the history; a probed rank silent for report_timeout_s since
// its launch is a harness error.
void Run::poll_command() {
  if (!probe_) return;
  probe_->poll(*hist_);
  if (!s_.probe || stopping_) return;
  if (hist_->now_ns() - launched_ns_ < static_cast<int64_t>(s_.report_timeout_s * 1e9)) return;
  std::vector<int> silent;
  {
    std::lock_guard lock(step_mu_);
    for (int r : running_ranks_) {
      if (!reported_.count(r)) silent.push_back(r);
    }
  }
  if (silent.empty()) return;
  const auto& argv = command_argv_[s_.launch == "once" ? -1 : silent[0]];
  raise<Error>(
      "rank{} {}: workload.command is running but reported nothing through the probe within "
      "workload.report_timeout_s ({} s; FAULTLINE_PROBE_FILE, docs/workloads.md); command: {}",
      silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), s_.report_timeout_s,
      shown_command(argv));
}

}  // namespace fl::harness::detail
