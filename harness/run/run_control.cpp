// Control actions on a live run (kill, restart, reshard, abort, live faults) and the tools the
// harness starts beside it (detectors, recovery tools): start, and drain at the end.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <future>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/run/launch_args.hpp"
#include "harness/run/run.hpp"
#include "injector/plan.hpp"

namespace fl::harness::detail {

namespace fs = std::filesystem;

ControlResult Run::control(const ControlAction& a) {
  std::promise<ControlResult> p;
  auto fut = p.get_future();
  boost::asio::post(io_, [&] {
    try {
      p.set_value(control_on_io(a));
    } catch (const std::exception& e) {
      p.set_value(ControlResult{false, e.what(), {}});
    }
  });
  if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return {false, "the run is not accepting control actions (it is ending)", {}};
  }
  return fut.get();
}

ControlResult Run::control_on_io(const ControlAction& a) {
  nlohmann::json rec = {{"action", a.action}, {"requester", a.requester}};
  auto done = [&](bool ok, std::string msg, std::vector<std::string> faults = {}) {
    rec["ok"] = ok;
    rec["message"] = msg;
    hist_->harness("control", rec, a.rank);
    return ControlResult{ok, std::move(msg), std::move(faults)};
  };
  if (a.action == "kill_rank") {
    if (a.rank < 0 || a.rank >= s_.ranks) {
      return done(false,
                  fmt::format("rank {} does not exist (allowed 0-{})", a.rank, s_.ranks - 1));
    }
    const pid_t pid = rank_pid(a.rank);
    if (pid == 0 || !running_ranks_.count(a.rank)) {
      return done(false, fmt::format("rank {} is not running", a.rank));
    }
    rec["signal"] = signal_name(a.signal);
    const bool own = launcher_->rank_pid(a.rank) != 0;  // else a descendant (under mpirun)
    if (own) sup_->mark_by_harness(pid);
    const bool ok = own ? sup_->signal(pid, a.signal) : sup_->signal_descendant(pid, a.signal);
    return done(ok,
                ok ? fmt::format("sent {} to rank {} (pid {})", signal_name(a.signal), a.rank, pid)
                   : fmt::format("rank {} (pid {}) is gone", a.rank, pid));
  }
  if (a.action == "restart_job") {
    std::string from = a.checkpoint.empty() ? dir_ + "/checkpoints" : a.checkpoint;
    if (s_.kind != "train") return done(false, "restart_job needs a training workload");
    // Checked before anything is looked at or changed: a refused request leaves the run as it
    // was and says nothing about files outside the run directory.
    if (!a.checkpoint.empty()) {
      if (auto why = check_restart_args({"--resume", a.checkpoint}, dir_); !why.empty()) {
        return done(false, why);
      }
    }
    if (auto why = check_restart_args(a.args, dir_); !why.empty()) {
      rec["args"] = a.args;
      return done(false, why);
    }
    if (a.checkpoint.empty() && !fs::exists(from + "/latest")) {
      from.clear();  // nothing saved yet: the job starts again from step 0
    } else if (!fs::exists(from)) {
      return done(false, fmt::format("no checkpoint at {} (the scenario writes checkpoints when "
                                     "workload.checkpoint.every > 0)",
                                     from));
    }
    if (a.dp > 0 && a.dp != s_.dp) {
      if (from.empty()) return done(false, "restart_job with dp needs a checkpoint to reshard");
      std::string error;
      if (!reshard_for_restart(a.dp, from, error)) return done(false, error);
      rec["dp"] = a.dp;
    }
    if (!a.args.empty()) {
      s_.extra_args.insert(s_.extra_args.end(), a.args.begin(), a.args.end());
      rec["args"] = a.args;
    }
    restart_from_ = from;
    rec["from"] = from;
    if (running_ranks_.empty()) {
      boost::asio::post(io_, [this] { on_exit(ExitInfo{"restart", -2, 0, false, 0, "ok", true}); });
    }
    launcher_->stop(*sup_);
    return done(true, from.empty() ? "restarting every rank from step 0 (no checkpoint yet)"
                                   : fmt::format("restarting every rank from {}", from));
  }
  if (a.action == "restart_rank") {
    if (!launcher_traits().rank_processes || a.rank < 0 || a.rank >= s_.ranks) {
      return done(false, fmt::format("restart_rank needs the {} launcher and a rank 0-{}",
                                     rank_process_launchers(), s_.ranks - 1));
    }
    if (running_ranks_.count(a.rank)) {
      return done(false, fmt::format("rank {} is running (kill it first)", a.rank));
    }
    auto host = launch_host();
    const pid_t pid = launcher_->start_rank(host, a.rank, worker_args(s_, dir_, ""));
    return done(true, fmt::format("rank {} relaunched (pid {}); it rejoins only a world that "
                                  "waits for it",
                                  a.rank, pid));
  }
  if (a.action == "abort") {
    stopping_ = true;
    stop_reason_ = "aborted by " + a.requester;
    io_.stop();
    return done(true, "aborting the run");
  }
  if (a.action == "list_faults") {
    std::vector<std::string> all = s_.plans;
    for (auto& p : live_plans_) all.push_back(p);
    return done(true, fmt::format("{} plan(s)", all.size()), all);
  }
  if (a.action == "arm_faults" || a.action == "clear_faults") {
    if (a.action == "arm_faults") fault::parse_plan(a.plan, "control: plan");  // bad plan: error
    const int n = ctl_->send_command(a.rank, a.action, a.plan, s_.seed);
    rec["plan"] = a.plan;
    rec["ranks_reached"] = n;
    if (a.action == "arm_faults") {
      live_plans_.push_back(a.plan);
      injected_.push_back(fmt::format("live plan '{}' to {} rank(s)", a.plan, n));
    } else {
      live_plans_.clear();
    }
    return done(n > 0, fmt::format("{} sent to {} connected rank(s)", a.action, n));
  }
  return done(false, fmt::format("unknown action '{}' (allowed: kill_rank, restart_rank, "
                                 "restart_job, abort, list_faults, arm_faults, clear_faults)",
                                 a.action));
}

// A restart into a smaller (or larger) data-parallel world: the latest checkpoint is converted
// with fl-ckpt reshard, and the next launch starts dp x tp x pp ranks.
bool Run::reshard_for_restart(int dp, std::string& from, std::string& error) {
  if (!launcher_traits().rank_processes) {
    error = fmt::format("restart_job with dp needs the {} launcher", rank_process_launchers());
    return false;
  }
  if (s_.dp % dp != 0 && dp % s_.dp != 0) {
    error =
        fmt::format("cannot reshard dp {} to dp {} (allowed: a divisor or multiple)", s_.dp, dp);
    return false;
  }
  const std::string out = fmt::format("{}/checkpoints-dp{}-r{}", dir_, dp, restarts_ + 1);
  // Run to completion here (a few hundred ms): the restart must not start before it ends.
  try {
    run_tool(
        {FAULTLINE_CKPT_BIN, "reshard", "--in", from, "--out", out, "--dp", std::to_string(dp)});
  } catch (const std::exception& e) {
    error = fmt::format("resharding to dp {} failed: {}", dp, e.what());
    return false;
  }
  hist_->harness("reshard", {{"from", from}, {"to", out}, {"dp_from", s_.dp}, {"dp", dp}});
  s_.dp = dp;
  s_.ranks = dp * s_.tp * s_.pp;
  s_.nodes = 1;
  from = out;
  return true;
}

void Run::start_tools() {
  std::vector<std::string> det = s_.detectors;
  det.insert(det.end(), o_.detectors.begin(), o_.detectors.end());
  tools_ = resolve_tools(det, o_.recovery.empty() ? s_.recovery : o_.recovery);
  if (tools_.empty()) return;
  fs::create_directories(dir_ + "/tools");
  for (const auto& t : tools_) {
    ProcessSpec p;
    p.name = "tool:" + t.name;
    p.argv = t.argv;
    p.cwd = dir_ + "/tools";
    for (auto& [k, v] : base_env()) p.env.push_back(k + "=" + v);
    for (auto& kv : tool_env(t, ctl_addr_, secret_, dir_)) p.env.push_back(kv);
    const pid_t pid = sup_->spawn(p);
    tool_pids_[pid] = t.name;
    has_recovery_ = has_recovery_ || t.recovery;
    hist_->harness("tool_start",
                   {{"tool", t.name}, {"argv", t.argv}, {"pid", pid}, {"recovery", t.recovery}});
  }
}

// The run is over: tools hear `run_ending` and get up to 3 s to post what they still have.
void Run::drain_tools() {
  if (tool_pids_.empty()) return;
  hist_->harness("run_ending", {{"tools", tool_pids_.size()}, {"wait_s", 3}});
  io_.restart();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!tool_pids_.empty() && std::chrono::steady_clock::now() < until) {
    io_.run_for(std::chrono::milliseconds(20));
  }
  for (auto& [pid, name] : tool_pids_) sup_->mark_by_harness(pid);
}

}  // namespace fl::harness::detail
