// workload.kind: command, the runner's side (command_probe.hpp).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/command_probe.hpp"

namespace fl::harness {

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
    });
  }
  std::lock_guard lock(mu_);
  reported_.clear();
  launched_ns_ = hist_.now_ns();
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
void CommandProbe::poll(bool stopping, const std::set<int>& running) {
  if (!probe_) return;
  probe_->poll(hist_);
  if (!s_.workload.probe || stopping) return;
  if (hist_.now_ns() - launched_ns_ < static_cast<int64_t>(s_.workload.report_timeout_s * 1e9))
    return;
  std::vector<int> silent;
  {
    std::lock_guard lock(mu_);
    for (int r : running) {
      if (!reported_.count(r)) silent.push_back(r);
    }
  }
  if (silent.empty()) return;
  raise<Error>(
      "rank{} {}: workload.command is running but reported nothing through the probe within "
      "workload.report_timeout_s ({} s; FAULTLINE_PROBE_FILE, docs/workloads.md); command: {}",
      silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), s_.workload.report_timeout_s,
      command_shown(silent[0]));
}

}  // namespace fl::harness
