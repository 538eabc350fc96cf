// Control actions on a live run (kill, restart, reshard, abort, live faults, dumps), one handler
// each in a table keyed by the action's name.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <future>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/workload_kinds.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/rank_dumps.hpp"
#include "harness/run/run.hpp"
#include "injector/plan.hpp"

namespace fl::harness::detail {

namespace fs = std::filesystem;

ControlResult Run::control(const ControlAction& a) {
  std::promise<ControlResult> p;
  auto fut = p.get_future();
  loop_.post([&] {
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

// What every handler answers with: the `control` history event (action, requester, what the
// handler adds) and the reply.
struct Run::ControlReply {
  History& hist;
  int rank;
  nlohmann::json rec;
  ControlResult done(bool ok, std::string msg, std::vector<std::string> faults = {}) {
    rec["ok"] = ok;
    rec["message"] = msg;
    hist.harness("control", rec, rank);
    return ControlResult{ok, std::move(msg), std::move(faults)};
  }
};

struct Run::ControlEntry {
  std::string name;  // ControlAction::action
  ControlResult (Run::*handle)(const ControlAction&, ControlReply&);
};

// The actions in the order the unknown-action error lists them.
const std::vector<Run::ControlEntry>& Run::control_actions() {
  static const std::vector<ControlEntry> table = {
      {"kill_rank", &Run::kill_rank},      {"restart_rank", &Run::restart_rank},
      {"restart_job", &Run::restart_job},  {"abort", &Run::abort_run},
      {"list_faults", &Run::list_faults},  {"arm_faults", &Run::send_faults},
      {"clear_faults", &Run::send_faults}, {"dump_flight_recorder", &Run::dump_flight_recorder}};
  return table;
}

ControlResult Run::control_on_io(const ControlAction& a) {
  ControlReply reply{*hist_, a.rank, {{"action", a.action}, {"requester", a.requester}}};
  std::vector<std::string> names;
  for (const auto& e : control_actions()) {
    if (e.name == a.action) return (this->*e.handle)(a, reply);
    names.push_back(e.name);
  }
  return reply.done(
      false, fmt::format("unknown action '{}' (allowed: {})", a.action, fmt::join(names, ", ")));
}

ControlResult Run::kill_rank(const ControlAction& a, ControlReply& r) {
  if (a.rank < 0 || a.rank >= s_.topo.ranks) {
    return r.done(false,
                  fmt::format("rank {} does not exist (allowed 0-{})", a.rank, s_.topo.ranks - 1));
  }
  const pid_t pid = rank_pid(a.rank);
  if (pid == 0 || !running_ranks_.count(a.rank)) {
    return r.done(false, fmt::format("rank {} is not running", a.rank));
  }
  r.rec["signal"] = signal_name(a.signal);
  const bool own = launcher_->rank_pid(a.rank) != 0;  // else a descendant (under mpirun)
  if (own) sup_->mark_by_harness(pid);
  const bool ok = own ? sup_->signal(pid, a.signal) : sup_->signal_descendant(pid, a.signal);
  return r.done(ok,
                ok ? fmt::format("sent {} to rank {} (pid {})", signal_name(a.signal), a.rank, pid)
                   : fmt::format("rank {} (pid {}) is gone", a.rank, pid));
}

ControlResult Run::restart_job(const ControlAction& a, ControlReply& r) {
  std::string from = a.checkpoint.empty() ? dir_ + "/checkpoints" : a.checkpoint;
  if (!workload_kind(s_.workload.kind).restartable) {
    return r.done(false, "restart_job needs a training workload");
  }
  // Checked before anything is looked at or changed: a refused request leaves the run as it
  // was and says nothing about files outside the run directory.
  if (!a.checkpoint.empty()) {
    if (auto why = check_restart_args({"--resume", a.checkpoint}, dir_); !why.empty()) {
      return r.done(false, why);
    }
  }
  if (auto why = check_restart_args(a.args, dir_); !why.empty()) {
    r.rec["args"] = a.args;
    return r.done(false, why);
  }
  if (a.checkpoint.empty() && !fs::exists(from + "/latest")) {
    from.clear();  // nothing saved yet: the job starts again from step 0
  } else if (!fs::exists(from)) {
    return r.done(false, fmt::format("no checkpoint at {} (the scenario writes checkpoints when "
                                     "workload.checkpoint.every > 0)",
                                     from));
  }
  if (a.dp > 0 && a.dp != s_.topo.dp) {
    if (from.empty()) return r.done(false, "restart_job with dp needs a checkpoint to reshard");
    std::string error;
    if (!reshard_for_restart(a.dp, from, error)) return r.done(false, error);
    r.rec["dp"] = a.dp;
  }
  if (!a.args.empty()) {
    s_.workload.extra_args.insert(s_.workload.extra_args.end(), a.args.begin(), a.args.end());
    r.rec["args"] = a.args;
  }
  restart_.request(from);
  r.rec["from"] = from;
  if (running_ranks_.empty()) {
    loop_.post([this] { on_exit(ExitInfo{"restart", -2, 0, false, 0, "ok", true}); });
  }
  launcher_->stop(*sup_);
  return r.done(true, from.empty() ? "restarting every rank from step 0 (no checkpoint yet)"
                                   : fmt::format("restarting every rank from {}", from));
}

ControlResult Run::restart_rank(const ControlAction& a, ControlReply& r) {
  if (!launcher_traits().rank_processes || a.rank < 0 || a.rank >= s_.topo.ranks) {
    return r.done(false, fmt::format("restart_rank needs the {} launcher and a rank 0-{}",
                                     rank_process_launchers(), s_.topo.ranks - 1));
  }
  if (running_ranks_.count(a.rank)) {
    return r.done(false, fmt::format("rank {} is running (kill it first)", a.rank));
  }
  auto host = launch_host();
  const pid_t pid = launcher_->start_rank(host, a.rank, worker_args(s_, dir_, ""));
  return r.done(true, fmt::format("rank {} relaunched (pid {}); it rejoins only a world that "
                                  "waits for it",
                                  a.rank, pid));
}

ControlResult Run::abort_run(const ControlAction& a, ControlReply& r) {
  stopping_ = true;
  stop_reason_ = "aborted by " + a.requester;
  loop_.stop();
  return r.done(true, "aborting the run");
}

ControlResult Run::list_faults(const ControlAction&, ControlReply& r) {
  std::vector<std::string> all = s_.faults.plans;
  for (auto& p : live_plans_) all.push_back(p);
  return r.done(true, fmt::format("{} plan(s)", all.size()), all);
}

// arm_faults and clear_faults: the command goes to every connected rank (or one).
ControlResult Run::send_faults(const ControlAction& a, ControlReply& r) {
  const bool arm = a.action == "arm_faults";
  if (arm) fault::parse_plan(a.plan, "control: plan");  // a bad plan is an error
  const int n = ctl_->send_command(a.rank, a.action, a.plan, s_.seed);
  r.rec["plan"] = a.plan;
  r.rec["ranks_reached"] = n;
  if (arm) {
    live_plans_.push_back(a.plan);
    injected_.push_back(fmt::format("live plan '{}' to {} rank(s)", a.plan, n));
  } else {
    live_plans_.clear();
  }
  return r.done(n > 0, fmt::format("{} sent to {} connected rank(s)", a.action, n));
}

// An on-demand flight-recorder dump of every rank (rank -1) or one, as PyTorch's dump-on-signal:
// a tool that suspects a hang gets the ranks' collective state before deciding. Answered once
// the signalled ranks wrote their dumps (at most 2 s); ok when at least one did.
ControlResult Run::dump_flight_recorder(const ControlAction& a, ControlReply& r) {
  if (a.rank < -1 || a.rank >= s_.topo.ranks) {
    return r.done(false, fmt::format("rank {} does not exist (allowed: -1 for every rank, or 0-{})",
                                     a.rank, s_.topo.ranks - 1));
  }
  const FrDumps d = request_fr_dumps(dump_targets(), "control by " + a.requester, a.rank);
  r.rec["dumped"] = d.dumped;
  r.rec["frozen"] = d.frozen;
  r.rec["missing"] = d.missing;
  r.rec["not_taking"] = d.not_taking;
  if (d.signalled.empty()) {
    return r.done(false,
                  fmt::format("no {} takes dump requests now{} (a rank announces it in "
                              "ranks/rankN/fr_dump_on_signal: a faultline worker once its "
                              "communicator is up, a PyTorch job at faultline_probe.torch.wrap())",
                              a.rank < 0 ? "rank" : fmt::format("rank {}", a.rank),
                              d.frozen.empty() ? "" : fmt::format(" (stopped: {})", d.frozen)));
  }
  auto list = [](const std::vector<int>& v) { return v.empty() ? "none" : fmt::format("{}", v); };
  return r.done(!d.dumped.empty(),
                fmt::format("dumped: {}; stopped, not asked: {}; no dump within 2 s: {}; not "
                            "taking requests: {}; in ranks/rankN/nccl_trace_rank_N",
                            list(d.dumped), list(d.frozen), list(d.missing), list(d.not_taking)));
}

// A restart into a smaller (or larger) data-parallel world: the latest checkpoint is converted
// with fl-ckpt reshard, and the next launch starts dp x tp x pp ranks.
bool Run::reshard_for_restart(int dp, std::string& from, std::string& error) {
  if (!launcher_traits().rank_processes) {
    error = fmt::format("restart_job with dp needs the {} launcher", rank_process_launchers());
    return false;
  }
  // Any size: fl-ckpt reshard pads each partition as the trainer's ZeRO does (ceil(total / dp)).
  const std::string out = fmt::format("{}/checkpoints-dp{}-r{}", dir_, dp, restart_.restarts() + 1);
  // Run to completion here (a few hundred ms): the restart must not start before it ends.
  try {
    run_tool({this_build::ckpt_bin(), "reshard", "--in", from, "--out", out, "--dp",
              std::to_string(dp)});
  } catch (const std::exception& e) {
    error = fmt::format("resharding to dp {} failed: {}", dp, e.what());
    return false;
  }
  hist_->harness("reshard", {{"from", from}, {"to", out}, {"dp_from", s_.topo.dp}, {"dp", dp}});
  s_.topo.dp = dp;
  s_.topo.ranks = dp * s_.topo.tp * s_.topo.pp;
  s_.topo.nodes = 1;
  from = out;
  return true;
}

}  // namespace fl::harness::detail

namespace fl::harness {

std::vector<std::string> control_action_names() {
  std::vector<std::string> names;
  for (const auto& e : detail::Run::control_actions()) names.push_back(e.name);
  return names;
}

}  // namespace fl::harness
