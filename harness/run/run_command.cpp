// workload.kind: command, the runner's side (command_probe.hpp).
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/command_probe.hpp"
#include "harness/run/torchelastic.hpp"

namespace fl::harness {

namespace {

nlohmann::json event_data(const HistoryEvent& e) {
  auto d = nlohmann::json::parse(e.data_json, nullptr, false);
  return d.is_object() ? d : nlohmann::json::object();
}

}  // namespace

CommandProbe::CommandProbe(const Scenario& s, const std::string& dir, History& hist,
                           const Launcher& launcher)
    : s_(s), dir_(dir), hist_(hist), launcher_(launcher) {}

CommandProbe::~CommandProbe() = default;

void CommandProbe::begin_launch() {
  if (!probe_) {
    probe_ = std::make_unique<ProbeIngest>(dir_, s_.topo.ranks);
    hist_.add_listener([this](const HistoryEvent& e) {
      if (e.source != "rank") return;
      std::lock_guard lock(mu_);
      reported_.insert(e.rank);
      if (e.kind == "error") errored_.insert(e.rank);
      if (e.kind == "hello") hello_pid_[e.rank] = event_data(e).value("pid", int64_t{0});
    });
  }
  std::lock_guard lock(mu_);
  reported_.clear();
  errored_.clear();
  hello_pid_.clear();
  gone_.clear();
  launched_ns_ = hist_.now_ns();
  errors_read_ = false;
}

void CommandProbe::note_line(int rank, const std::string& line) {
  last_line_[rank] = line;
}

void CommandProbe::final_poll() {
  if (probe_) probe_->poll(hist_);
}

bool CommandProbe::rank_reported(int rank) {
  if (probe_) probe_->poll(hist_);
  std::lock_guard lock(mu_);
  return reported_.count(rank) > 0;
}

std::string CommandProbe::command_shown(int rank) {
  std::string shown;
  for (const auto& e : hist_.events()) {
    if (e.source != "harness" || e.kind != "launch" || e.rank != std::max(rank, 0)) continue;
    const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (d.is_discarded() || !d.contains("argv") || !d["argv"].is_array()) continue;
    shown.clear();
    for (const auto& a : d["argv"]) {
      if (a.is_string()) shown += (shown.empty() ? "" : " ") + a.get<std::string>();
    }
  }
  return shown.size() > 300 ? shown.substr(0, 300) + "..." : shown;
}

// A rank of a probed command that ended before its first event: the command is wrong (not the
// job it should be, a missing module, a bad option), not a symptom of the scenario's fault.
void CommandProbe::check_exit(const ExitInfo& x, bool stopping) {
  if (!s_.workload.probe || stopping || x.by_harness) return;
  const bool launcher = launcher_.is_job_process(x.pid);
  if (!launcher && x.rank < 0) return;
  if (launcher) {
    for (int r = 0; r < s_.topo.ranks; ++r) {
      if (rank_reported(r)) return;  // the launcher started the job: its end is the job's
    }
  } else if (rank_reported(x.rank)) {
    return;
  }
  const std::string how = x.signaled ? fmt::format("was killed by {}", signal_name(x.code))
                                     : fmt::format("exited with status {}", x.code);
  const auto last = last_line_.find(launcher ? -1 : x.rank);
  raise<Error>(
      "{}: workload.command {} {:.1f} s after launch before it reported anything through the "
      "probe (FAULTLINE_PROBE_FILE; set workload.probe: false for a job without it); command: "
      "{}{}; see {}",
      launcher ? fmt::format("ranks 0-{} (workload.launch: once)", s_.topo.ranks - 1)
               : fmt::format("rank {}", x.rank),
      how, static_cast<double>(hist_.now_ns() - launched_ns_) / 1e9,
      command_shown(launcher ? 0 : x.rank),
      last == last_line_.end() ? "" : "; its last output: " + last->second.substr(0, 300),
      launcher ? dir_ + "/launcher.log" : fmt::format("{}/ranks/rank{}/output.log", dir_, x.rank));
}

// Every tick: new probe lines into the history; a probed rank silent for report_timeout_s since
// its launch is a harness error.
std::map<int, int64_t> CommandProbe::gone_after_error(const std::set<int>& running) {
  std::map<int, int64_t> out;
  if (s_.workload.launch != "once") return out;  // per_rank: the harness sees its children end
  std::lock_guard lock(mu_);
  for (int r : running) {
    const auto pid = hello_pid_.find(r);
    if (!errored_.count(r) || gone_.count(r) || pid == hello_pid_.end() || pid->second <= 0)
      continue;
    if (::kill(static_cast<pid_t>(pid->second), 0) == 0 || errno != ESRCH) continue;
    gone_.insert(r);
    out[r] = pid->second;
  }
  return out;
}

std::vector<int> CommandProbe::poll(bool stopping, const std::set<int>& running) {
  if (!probe_) return {};
  probe_->poll(hist_);
  std::vector<int> gone;
  for (const auto& [r, pid] : gone_after_error(running)) {
    hist_.harness("worker_gone", {{"pid", pid}, {"after", "an error event"}}, r);
    gone.push_back(r);
  }
  if (!s_.workload.probe || stopping) return gone;
  if (hist_.now_ns() - launched_ns_ < static_cast<int64_t>(s_.workload.report_timeout_s * 1e9))
    return gone;
  std::vector<int> silent;
  {
    std::lock_guard lock(mu_);
    for (int r : running) {
      if (!reported_.count(r)) silent.push_back(r);
    }
  }
  if (silent.empty()) return gone;
  raise<Error>(
      "rank{} {}: workload.command is running but reported nothing through the probe within "
      "workload.report_timeout_s ({} s; FAULTLINE_PROBE_FILE, docs/workloads.md); command: {}",
      silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), s_.workload.report_timeout_s,
      command_shown(silent[0]));
}

namespace {

// Where rank `rank` keeps its error file: what its probe said (under torchrun the agent chose
// it), else what the command launcher gave it (launch: per_rank).
std::string error_file_of(int rank, const std::vector<HistoryEvent>& ev, const Scenario& s,
                          const std::string& dir) {
  std::string said;
  for (const auto& e : ev) {
    if (e.source == "rank" && e.kind == "hello" && e.rank == rank) {
      said = event_data(e).value("error_file", "");
    }
  }
  if (!said.empty()) return said;
  return s.workload.launch == "once" ? "" : fmt::format("{}/ranks/rank{}/error.json", dir, rank);
}

}  // namespace

void CommandProbe::read_error_files() {
  if (errors_read_) return;
  errors_read_ = true;
  if (probe_) probe_->poll(hist_);
  const auto ev = hist_.events();
  auto read = [&](const std::string& path, int rank, const char* kind) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
    std::string why;
    // A path the job reported: read only inside the run directory (torchrun's default log
    // directory is under the rank's TMPDIR, RUN_DIR/tmp; --log_dir may name another).
    if (!path_inside(path, dir_)) {
      why = fmt::format("{} is outside the run directory {} (torchrun: --log_dir {{run_dir}}/...)",
                        path, dir_);
    } else if (const auto w = read_worker_error(path, &why)) {
      auto d = w->to_json();
      d["file"] = path;
      hist_.harness(kind, d, rank);
      return;
    }
    hist_.harness("error_file_refused", {{"file", path}, {"why", why.substr(0, 300)}}, rank);
  };
  for (int r = 0; r < s_.topo.ranks; ++r) {
    const std::string path = error_file_of(r, ev, s_, dir_);
    if (!path.empty()) read(path, r, "worker_error");
  }
  // Each node's launcher's own file (launch: once), as its launch event names it.
  std::set<std::string> launchers;
  for (const auto& e : ev) {
    if (e.source == "harness" && e.kind == "launch") {
      const std::string f = event_data(e).value("error_file", "");
      if (!f.empty() && launchers.insert(f).second) read(f, -1, "torchrun_error");
    }
  }
}

// A rank under one torchrun that sent no exit event: the harness is not its parent and has no
// status of its own, but it knows what it did to the rank, what torchrun said it did, and what
// the rank's error file holds.
void CommandProbe::explain_end(int rank, nlohmann::json& ex) {
  read_error_files();
  const auto ev = hist_.events();
  int64_t pid = 0;
  std::string sent;  // the scenario's signal, delivered to this pid
  std::optional<nlohmann::json> err;
  for (const auto& e : ev) {
    if (e.rank != rank) continue;
    const auto d = event_data(e);
    if (e.source == "rank" && e.kind == "hello") pid = d.value("pid", int64_t{0});
    if (e.source != "harness") continue;
    if (e.kind == "fault_injected" && d.value("fault", "") == "signal" &&
        d.value("delivered", false) && d.value("pid", int64_t{-1}) == pid) {
      sent = d.value("signal", "");
    }
    if (e.kind == "worker_error") err = d;
  }
  if (pid <= 0) return;
  ex["pid"] = pid;
  const nlohmann::json before = ex;
  // What follows is how the worker itself ended, before any teardown of its launcher.
  ex["by_harness"] = false;
  const auto closed = torchrun_closed(ev);
  const auto by_torchrun = closed.find(pid);
  auto signaled = [&](const std::string& sig, const std::string& by) {
    const int n = signal_number(sig);
    ex["class"] = classify_exit(true, n);
    ex["code"] = n;
    ex["signaled"] = true;
    ex["ended_by"] = by;
  };
  if (sent == "SIGKILL") {  // cannot be caught: the rank died of it
    signaled(sent, "the scenario's signal");
  } else if (by_torchrun != closed.end()) {
    signaled(by_torchrun->second, "torchrun closed it after a peer failed");
    ex["torn_down"] = true;
  } else if (err) {
    ex["class"] = "error";
    ex["code"] = err->value("error_code", 0) > 0 ? err->value("error_code", 0) : 1;
    ex["signaled"] = false;
    ex["ended_by"] = "its exception (error file): " + err->value("message", "");
  } else if (!sent.empty() && sent != "SIGSTOP" && sent != "SIGCONT") {
    signaled(sent, "the scenario's signal");
  } else {
    ex = before;  // nothing known: it ended with its launcher
  }
}

}  // namespace fl::harness
