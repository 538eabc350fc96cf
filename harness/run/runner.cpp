#include "harness/run/runner.hpp"

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/control/metrics_endpoint.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/faults/residue.hpp"
#include "harness/history/job_status.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/process/hosts.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/artifact_server.hpp"
#include "harness/run/command_probe.hpp"
#include "harness/run/layout_check.hpp"
#include "harness/run/rank_dumps.hpp"
#include "harness/run/run.hpp"
#include "harness/run/run_agents.hpp"
#include "harness/run/run_side.hpp"
#include "harness/run/run_tools.hpp"
#include "harness/run/watchdogs.hpp"
#include "injector/plan.hpp"
#include "kernels/device.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace detail {

Run::Run(const Scenario& s, const RunOptions& o)
    : s_(with_recovery_launcher(s, o.recovery)),
      o_(o),
      launcher_kind_(launcher_kind(s_.topo.launcher)),
      launcher_(launcher_info(launcher_kind_).make()) {}

Run::~Run() = default;

void Run::launch_all(const std::string& resume_from) {
  running_ranks_.clear();
  {
    std::lock_guard lock(step_mu_);
    hello_pid_.clear();
  }
  if (command_) command_->begin_launch();  // the probe's files, reports (run_command.cpp)
  auto host = launch_host();
  launcher_->start(host, worker_args(s_, dir_, resume_from));
}

LaunchHost Run::launch_host() {
  return LaunchHost{s_,
                    dir_,
                    secret_,
                    *hist_,
                    *sup_,
                    *faults_,
                    [this](int r) { return rank_env(r); },
                    [this](int r) { running_ranks_.insert(r); },
                    [this] { loop_.poll(); },
                    &run_dir_,
                    o_.recovery.empty() ? s_.tools.recovery : o_.recovery};
}

DumpTargets Run::dump_targets() {
  return DumpTargets{s_.topo.ranks, dir_, [this](int r) { return rank_pid(r); }, *hist_};
}

void Run::stop_run(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  stop_reason_ = why;
  loop_.stop();
}

void Run::on_line(int rank, const std::string& name, const std::string& stream,
                  const std::string& line) {
  const double t = static_cast<double>(hist_->now_ns()) / 1e9;
  if (name.rfind("tool:", 0) == 0) {
    // A tool's output stays out of the history: other detectors must not read each other.
    std::ofstream(fmt::format("{}/tools/{}.log", dir_, name.substr(5)), std::ios::app)
        << fmt::format("[+{:.3f}s] [{}] {}\n", t, stream == "stdout" ? "out" : "err", line);
    return;
  }
  // A rank's output goes to its log; the launcher's job process (mpirun) has a log of its own;
  // helpers (ompi-server, fault holders) share one.
  const std::string job = launcher_->job_process_name();
  const bool is_job = !job.empty() && name == job;
  const std::string file = rank >= 0 ? fmt::format("{}/ranks/rank{}/output.log", dir_, rank)
                                     : fmt::format("{}/{}.log", dir_, is_job ? job : "helpers");
  auto& out = logs_[rank >= 0 ? rank : (is_job ? -1 : -2)];
  if (command_ && (rank >= 0 || is_job)) command_->note_line(rank, line);
  if (!out.is_open()) out.open(file, std::ios::app);
  out << fmt::format("[+{:.3f}s] [{}] {}\n", t, stream == "stdout" ? "out" : "err", line);
  out.flush();
  hist_->harness("output", {{"stream", stream}, {"line", line}, {"process", name}}, rank);
}

void Run::on_exit(const ExitInfo& x) {
  if (side_->on_exit(x) || tools_->on_exit(x)) return;  // the reference run's, a tool's
  // A command that ended before it reported anything: harness error.
  if (command_) command_->check_exit(x, stopping_);
  nlohmann::json d = exit_fields(x);
  if (x.rank >= 0 && x.klass != "ok" && !x.by_harness) {
    restart_.rank_failed();
    watch_->rank_failed(x.rank);
  }
  if (x.rank >= 0) {
    hist_->harness("rank_exit", d, x.rank);
    faults_->on_rank_exit(x.rank);
    running_ranks_.erase(x.rank);
  } else if (launcher_->is_job_process(x.pid)) {
    job_process_ended(x, std::move(d));
  } else {
    d["process"] = x.name;
    hist_->harness("process_exit", d);
  }
  if (running_ranks_.empty()) all_ranks_ended();
}

// Per-rank ends come from the workers' exit events; a rank that never sent one ended with the
// launcher's job process (or was killed by it).
void Run::job_process_ended(const ExitInfo& x, nlohmann::json d) {
  d["process"] = x.name;
  hist_->harness("process_exit", d);
  std::set<int> reported;
  for (const auto& e : hist_->events()) {
    if (e.source == "rank" && e.kind == "exit") reported.insert(e.rank);
  }
  for (int r : std::set<int>(running_ranks_)) {
    if (reported.count(r)) continue;
    nlohmann::json ex = {
        {"pid", 0},
        {"class", x.klass == "ok" && s_.workload.kind != "command" ? "error" : x.klass},
        {"code", x.code},
        {"signaled", x.signaled},
        {"by_harness", x.by_harness},
        {"note", "no exit event from the rank; ended with " + x.name}};
    faults_->explain_exit(r, ex);  // a host's agent may have seen how it ended
    // Under one torchrun: killed by the scenario, failed on its own, or closed by torchrun.
    if (command_) command_->explain_end(r, ex);
    hist_->harness("rank_exit", ex, r);
    faults_->on_rank_exit(r);
  }
  running_ranks_.clear();
  launcher_->job_process_ended();
}

void Run::all_ranks_ended() {
  const auto d = restart_.all_ranks_ended(
      stopping_, [this] { return faults_->on_all_exited(); }, dir_ + "/checkpoints");
  switch (d.next) {
    case RestartPolicy::Next::kRestart:
      recovery_timer_.cancel();
      hist_->harness("restart", {{"from", d.from},
                                 {"restart", restart_.restarts()},
                                 {"ranks", s_.topo.ranks},
                                 {"dp", s_.topo.dp},
                                 {"args", s_.workload.extra_args}});
      launch_all(d.from);
      return;
    case RestartPolicy::Next::kAwaitRecovery: {
      // A recovery tool is attached: give it time to act on the failure before the run ends.
      constexpr int kWaitS = 10;
      hist_->harness("awaiting_recovery", {{"wait_s", kWaitS}});
      recovery_timer_.after(std::chrono::seconds(kWaitS), [this] {
        if (!running_ranks_.empty() || restart_.pending()) return;
        hist_->harness("recovery_timeout", {{"reason", "no restart within the wait"}});
        loop_.stop();
      });
      return;
    }
    case RestartPolicy::Next::kWait:
      return;  // the recovery window's timer ends the run
    case RestartPolicy::Next::kEnd:
      loop_.stop();
      return;
  }
}

pid_t Run::rank_pid(int rank) {
  // A command's process that said hello is the job's (not a torchrun agent).
  if (s_.workload.kind == "command") {
    std::lock_guard lock(step_mu_);
    if (auto it = hello_pid_.find(rank); it != hello_pid_.end() && it->second > 0)
      return it->second;
  }
  if (const pid_t pid = launcher_->rank_pid(rank); pid != 0) return pid;
  std::lock_guard lock(step_mu_);
  auto it = hello_pid_.find(rank);
  return it == hello_pid_.end() ? 0 : it->second;
}

// Step-triggered out-of-process faults (signals, files, network). Runs on every tick and as soon
// as a step event arrives: a token of a fast model takes a few ms, a tick 100.
void Run::check_progress() {
  progress_check_pending_ = false;
  if (stopping_ || !faults_) return;
  std::map<int, int64_t> steps;
  {
    std::lock_guard lock(step_mu_);
    steps = max_step_;
  }
  if (faults_->on_progress(
          steps, [this](int r) { return rank_pid(r); },
          [this](int r) { return launcher_->rank_pid(r) != 0; })) {
    ControlAction a;
    a.action = "restart_job";
    a.requester = "fault";
    control_on_io(a);
  }
}

void Run::tick() {
  // The ranks' events reach the file within a tick: `faultline status` reads it while the run goes.
  hist_->flush();
  if (command_) {  // a worker under torchrun gone after its error: fail-fast's grace
    for (int r : command_->poll(stopping_, running_ranks_)) watch_->rank_failed(r);
  }
  check_progress();
  fail_fast();
  // A hang expectation ends the run once the hang is established (no need to wait for timeouts).
  if (!stopping_ && !restart_.recovery_attached() && watch_->hang_established(tools_->running())) {
    stopping_ = true;
    stop_reason_ = "hang established";
    hist_->harness("watchdog_stop",
                   {{"reason", "hang established"}, {"hang_s", oracles::hang_seconds(s_.expect)}});
    request_fr_dumps(dump_targets(), "hang established");
    request_stack_dumps(dump_targets(), "hang established");
    loop_.stop();
    return;
  }
  ticker_.after(std::chrono::milliseconds(100), [this] { tick(); });
}

void Run::fail_fast() {
  if (stopping_ || restart_.pending() || running_ranks_.empty() ||
      launcher_traits().aborts_on_rank_failure) {
    return;
  }
  int failed = -1;
  double grace_s = 0;
  if (!watch_->fail_fast_due(failed, grace_s)) return;
  const std::vector<int> killed = launcher_->kill_ranks(*sup_, running_ranks_);
  hist_->harness("teardown_after_failure",
                 {{"failed_rank", failed}, {"grace_s", grace_s}, {"killed", killed}});
}

RunResult Run::go() {
  RunResult res;
  prepare();
  res.run_dir = dir_;
  side_ = std::make_unique<SideRuns>(s_, o_, dir_, run_dir_, *hist_, loop_);
  tools_ = std::make_unique<RunTools>(dir_, *hist_);
  agents_ = std::make_unique<RunAgents>(
      s_, o_, dir_, run_dir_, *hist_, loop_, [this] { return stopping_; },
      [this](const std::string& why) { stop_run(why); });
  if (s_.workload.kind == "command")
    command_ = std::make_unique<CommandProbe>(s_, dir_, *hist_, *launcher_);
  // What killed runs left outside their run directories goes before this run adds its own
  // (residue.hpp: cgroups, shared memory of owners that are gone).
  if (const auto found = faults::sweep_residue(faults::default_residue_dirs(), false);
      !found.empty()) {
    hist_->harness("cleanup", faults::residue_json(found, false));
  }
  if (o_.print_events && o_.print_summary) {
    print_header();
    // Printed under the history's lock as events arrive: one short line each.
    hist_->add_listener([this](const HistoryEvent& e) {
      if (auto line = live_line(e, live_)) {
        std::printf("%s\n", line->c_str());
        std::fflush(stdout);
      }
    });
  }
  try {
    start_run();
    loop_.run();
    if (const std::string lost = agents_->lost(); !lost.empty()) raise<Error>("{}", lost);
  } catch (const std::exception& e) {
    res.harness_error = e.what();
    hist_->harness("harness_error", {{"message", e.what()}});
  }
  res.control_addr = ctl_addr_;
  finish(res);
  return res;
}

// From the checks before anything starts to the first launch; the loop runs next.
void Run::start_run() {
  // From here on SIGINT/SIGTERM end the run the orderly way (teardown, verdict `interrupted`);
  // a signal that comes before the I/O loop runs is handled as soon as it does.
  loop_.on_signal({SIGINT, SIGTERM}, [this](int sig) {
    stopping_ = true;
    stop_reason_ = "harness got " + signal_name(sig);
    hist_->harness("interrupted", {{"signal", signal_name(sig)}});
    request_stack_dumps(dump_targets(), stop_reason_);  // an outer timeout's kill leaves evidence
    loop_.stop();
  });
  if (launcher_kind_ == LauncherKind::kSrun) {
    agents_->check_allocation();  // Slurm there, the allocation fits the topology
  } else if (!s_.topo.hosts.empty() && !agents_->use_allocation()) {
    check_hosts(s_);  // every host answers through the rsh agent, or nothing is launched
  }
  if (!s_.side_runs.prepare_yaml.empty()) side_->run_preparation();
  start_control_plane();
  if (!s_.workload.fetch.empty()) start_artifact_hub();  // after the secret: the hub asks for it
  start_metrics_endpoint();
  if (o_.print_events && o_.print_summary) {
    std::printf("  control    %s\n", ctl_addr_.c_str());
    if (metrics_) std::printf("  metrics    http://%s/metrics\n", metrics_addr_.c_str());
    std::fflush(stdout);
  }
  watch_ranks();
  record_run_start();
  if (o_.on_ready) o_.on_ready(ctl_addr_, dir_);
  sup_ = std::make_unique<Supervisor>(
      loop_.io(),
      [this](int rank, const std::string& name, const std::string& stream,
             const std::string& line) { on_line(rank, name, stream, line); },
      [this](const ExitInfo& x) { on_exit(x); });
  tools_->start(s_, o_, *sup_, restart_, ctl_addr_, secret_);
  side_->start_baseline(*sup_, stopping_);
  master_port_ = free_port();
  faults_ = std::make_unique<OutOfProcessFaults>(s_, dir_, *hist_, *sup_);
  agents_->start(*sup_, *faults_, ctl_addr_);  // before any fault or rank
  faults_->prepare(master_port_);
  {
    auto host = launch_host();
    launcher_->prepare(host);
  }
  if (!stopping_) launch_all(s_.workload.resume ? dir_ + "/checkpoints" : "");
  arm_timers();
}

// Steps (for step-triggered faults) and hellos (a command's own pids) as the ranks report them.
void Run::watch_ranks() {
  hist_->add_listener([this](const HistoryEvent& e) {
    if (e.source != "rank") return;
    if (e.kind == "step" || e.kind == "hello") {
      std::lock_guard lock(step_mu_);
      if (e.kind == "step") {
        auto& m = max_step_[e.rank];
        m = std::max(m, e.step);
        if (!progress_check_pending_.exchange(true)) loop_.post([this] { check_progress(); });
      } else {
        auto d = nlohmann::json::parse(e.data_json, nullptr, false);
        if (!d.is_discarded()) hello_pid_[e.rank] = d.value("pid", 0);
      }
    }
  });
}

void Run::record_run_start() {
  hist_->harness(
      "run_start",
      {{"run_id", id_},
       {"scenario", s_.name},
       {"fix", o_.fix},
       {"ranks", s_.topo.ranks},
       {"nodes", s_.topo.nodes},
       {"layout",
        {{"dp", s_.topo.dp}, {"tp", s_.topo.tp}, {"pp", s_.topo.pp}, {"zero", s_.topo.zero}}},
       {"launcher", s_.topo.launcher},
       {"backend", s_.topo.backend},
       {"seed", s_.seed},
       {"control", ctl_addr_},
       {"expect", {{"oracle", s_.expect.oracle}, {"symptom", s_.expect.symptom}}}});
  if (!s_.topo.launcher_reason.empty()) {  // topology.launcher: auto chose it
    hist_->harness("launcher_choice",
                   {{"launcher", s_.topo.launcher}, {"reason", s_.topo.launcher_reason}});
  }
  for (auto& p : s_.faults.plans) hist_->harness("fault_armed", {{"plan", p}, {"via", "scenario"}});
}

// The run timeout, and the tick that drives the watchdogs.
void Run::arm_timers() {
  timeout_.after(std::chrono::milliseconds(static_cast<int64_t>(s_.timeouts.run_s * 1000)), [this] {
    stopping_ = true;
    stop_reason_ = fmt::format("run timeout ({} s)", s_.timeouts.run_s);
    hist_->harness("run_timeout", {{"after_s", s_.timeouts.run_s}});
    request_stack_dumps(dump_targets(), stop_reason_);
    loop_.stop();
  });
  tick();
}

}  // namespace detail

void write_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text);  // a fresh, exclusive temporary: never a planted NAME.tmp
}

void check_runnable_here(const Scenario& scenario) {
  if (scenario.workload.device == "cuda" && cuda_device_count() == 0) {
    throw ScenarioError(fmt::format(
        "{}: workload.device is cuda but no CUDA device is visible on this machine{}; run it on a "
        "GPU machine, or on CPU ranks with --set workload.device=cpu",
        scenario.file, built_with_cuda() ? "" : " (and this build has no CUDA)"));
  }
  if (const std::string why = command_program_problem(scenario); !why.empty()) {
    throw ScenarioError(fmt::format("{}: workload.command[0]: {}", scenario.file, why));
  }
  check_layout_accepted(scenario);  // a layout every rank would refuse before step 0
  // Below, what the harness's own machine must have (with hosts or srun the ranks' machines do).
  if (!scenario.topo.hosts.empty() || scenario.topo.launcher == "srun") return;
  // As the hide fault checks its library (hide.cpp).
  const std::vector<std::string> have = faults::plugin_libraries();
  for (const auto& p : scenario.workload.plugins) {
    const std::string lib = "libfl_" + p + ".so";
    if (have.empty() || std::binary_search(have.begin(), have.end(), lib)) continue;
    throw ScenarioError(fmt::format(
        "{}: workload.plugins: no library '{}' in the plugin directory {} (FAULTLINE_PLUGIN_DIR; "
        "allowed: {})",
        scenario.file, lib, faults::plugin_dir(), fmt::join(have, ", ")));
  }
  // A cgroup fault applied by the harness itself (the agents apply it with hosts or srun).
  for (const auto& f : scenario.faults.oop) {
    try {
      if (f->kind == "memory_limit") {
        faults::check_cgroup_root(faults::memory_cgroup_root(), "FAULTLINE_CGROUP_ROOT", f->kind,
                                  "memory");
      } else if (f->kind == "cpu_quota") {
        faults::check_cgroup_root(faults::cpu_cgroup_root(), "FAULTLINE_CPU_CGROUP_ROOT", f->kind,
                                  "cpu");
      }
    } catch (const Error& e) {
      throw ScenarioError(fmt::format("{}: faults[].{}", scenario.file, e.what()));
    }
  }
}

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  check_runnable_here(scenario);
  if (scenario.topo.launcher == "mpirun" &&
      options.results_dir.find_first_of(" \t\n\"'") != std::string::npos) {
    // Every rank's files are named in its app-file line, which is split at whitespace.
    throw ConfigError(fmt::format(
        "--results '{}': launcher mpirun cannot name files under a path with whitespace or "
        "quotes (its app file splits at them); choose another results directory",
        options.results_dir));
  }
  detail::Run run(scenario, options);
  return run.go();
}

Scenario replay_scenario(const std::string& run_dir) {
  Scenario s = load_scenario(run_dir + "/scenario.yaml");
  std::vector<fault::FiredRecord> fired;
  for (int r = 0; r < s.topo.ranks; ++r) {
    const std::string log = fmt::format("{}/ranks/rank{}/fired.jsonl", run_dir, r);
    if (!fs::exists(log)) continue;
    for (auto& rec : fault::read_fired_log(log)) fired.push_back(std::move(rec));
  }
  s.faults.plans.clear();
  if (!fired.empty()) s.faults.plans.push_back(fault::replay_plan(fired));
  s.name += "-replay";
  return s;
}

int outcome_exit_code(const std::string& outcome) {
  return outcome == "pass" ? 0 : outcome == "fail" ? 1 : outcome == "interrupted" ? 4 : 3;
}

Verdict judge_run_dir(const std::string& run_dir, RecoveredHistory* seen) {
  const std::string scen = run_dir + "/scenario.yaml";
  Scenario s = load_scenario(scen);
  RecoveredHistory h = history_with_rank_files(run_dir);
  Verdict v = judge(s.expect, h.events);
  if (seen) *seen = std::move(h);
  return v;
}

}  // namespace fl::harness
