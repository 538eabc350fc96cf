#include "harness/run/runner.hpp"

#include "harness/run/run.hpp"
#include "harness/run/summary_lines.hpp"
#include "kernels/device.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/file_read.hpp"
#include "base/private_dir.hpp"
#include "base/settings.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/residue.hpp"
#include "harness/run/artifact_server.hpp"
#include "harness/run/controller.hpp"
#include "harness/run/history.hpp"
#include "harness/run/hosts.hpp"
#include "harness/run/launch_args.hpp"
#include "harness/run/oop_faults.hpp"
#include "harness/run/supervisor.hpp"
#include "harness/run/tools.hpp"
#include "injector/plan.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace detail {

void Run::launch_all(const std::string& resume_from) {
  running_ranks_.clear();
  {
    std::lock_guard lock(step_mu_);
    hello_pid_.clear();
  }
  if (s_.workload.kind == "command")
    begin_command_launch();  // the probe's files, reports (command_launch.cpp)
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
                    [this] { io_.poll(); },
                    &run_dir_};
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
  if (s_.workload.kind == "command" && (rank >= 0 || is_job)) last_line_[rank] = line;
  if (!out.is_open()) out.open(file, std::ios::app);
  out << fmt::format("[+{:.3f}s] [{}] {}\n", t, stream == "stdout" ? "out" : "err", line);
  out.flush();
  hist_->harness("output", {{"stream", stream}, {"line", line}, {"process", name}}, rank);
}

void Run::on_exit(const ExitInfo& x) {
  nlohmann::json d = {{"pid", x.pid},
                      {"class", x.klass},
                      {"code", x.code},
                      {"signaled", x.signaled},
                      {"by_harness", x.by_harness}};
  if (x.signaled) d["signal"] = signal_name(x.code);
  if (baseline_pid_ != 0 && x.pid == baseline_pid_) return on_baseline_exit(x);
  if (auto it = tool_pids_.find(x.pid); it != tool_pids_.end()) {
    d["tool"] = it->second;
    hist_->harness("tool_exit", d);
    tool_pids_.erase(it);
    return;
  }
  check_command_exit(x);  // a command that ended before it reported anything: harness error
  if (x.rank >= 0 && x.klass != "ok" && !x.by_harness) restart_.rank_failed();
  if (x.rank >= 0) {
    if (x.klass != "ok" && !x.by_harness && first_failure_ns_ < 0) {
      first_failure_ns_ = hist_->now_ns();
      first_failure_rank_ = x.rank;
    }
    hist_->harness("rank_exit", d, x.rank);
    faults_->on_rank_exit(x.rank);
    running_ranks_.erase(x.rank);
  } else if (launcher_->is_job_process(x.pid)) {
    // Per-rank ends come from the workers' exit events; a rank that never sent one ended with
    // the launcher's job process (or was killed by it).
    d["process"] = x.name;
    hist_->harness("process_exit", d);
    std::set<int> reported;
    for (const auto& e : hist_->events()) {
      if (e.source == "rank" && e.kind == "exit") reported.insert(e.rank);
    }
    for (int r : std::set<int>(running_ranks_)) {
      if (!reported.count(r)) {
        nlohmann::json ex = {
            {"pid", 0},
            {"class", x.klass == "ok" && s_.workload.kind != "command" ? "error" : x.klass},
            {"code", x.code},
            {"signaled", x.signaled},
            {"by_harness", x.by_harness},
            {"note", "no exit event from the rank; ended with " + x.name}};
        faults_->explain_exit(r, ex);  // a host's agent may have seen how it ended
        hist_->harness("rank_exit", ex, r);
        faults_->on_rank_exit(r);
      }
    }
    running_ranks_.clear();
    launcher_->job_process_ended();
  } else {
    d["process"] = x.name;
    hist_->harness("process_exit", d);
  }
  if (running_ranks_.empty()) all_ranks_ended();
}

void Run::all_ranks_ended() {
  const auto d = restart_.all_ranks_ended(
      stopping_, [this] { return faults_->on_all_exited(); }, dir_ + "/checkpoints");
  switch (d.next) {
    case RestartPolicy::Next::kRestart:
      if (recovery_timer_) recovery_timer_->cancel();
      hist_->harness("restart", {{"from", d.from},
                                 {"restart", restart_.restarts()},
                                 {"ranks", s_.ranks},
                                 {"dp", s_.dp},
                                 {"args", s_.workload.extra_args}});
      launch_all(d.from);
      return;
    case RestartPolicy::Next::kAwaitRecovery: {
      // A recovery tool is attached: give it time to act on the failure before the run ends.
      constexpr int kWaitS = 10;
      hist_->harness("awaiting_recovery", {{"wait_s", kWaitS}});
      recovery_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
      recovery_timer_->expires_after(std::chrono::seconds(kWaitS));
      recovery_timer_->async_wait([this](const boost::system::error_code& ec) {
        if (ec || !running_ranks_.empty() || restart_.pending()) return;
        hist_->harness("recovery_timeout", {{"reason", "no restart within the wait"}});
        io_.stop();
      });
      return;
    }
    case RestartPolicy::Next::kWait:
      return;  // the recovery window's timer ends the run
    case RestartPolicy::Next::kEnd:
      io_.stop();
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
  poll_command();
  check_progress();
  fail_fast(hist_->now_ns());
  // A hang expectation ends the run once the hang is established (no need to wait for timeouts).
  if (s_.expect.oracle == "hang" && !stopping_ && !restart_.recovery_attached()) {
    const int64_t now = hist_->now_ns();
    if (now - last_hang_check_ > 500'000'000) {
      last_hang_check_ = now;
      RunSummary seen;
      {
        std::lock_guard lock(summary_mu_);
        seen = summary_;
      }
      finish_summary(seen);
      if (hang_first_ns_ < 0 && oracles::find_hang(s_.expect, seen, now - 1'000'000'000)) {
        hang_first_ns_ = now;
        if (!tool_pids_.empty()) {
          // Detectors are watching: the hang goes on a while longer, as it would in a real job,
          // so a detector's own timeout (not the oracle's) decides whether it sees it.
          hist_->harness("hang_established", {{"tools_window_s", kToolHangWindowS}});
        }
      }
      const int64_t window = tool_pids_.empty() ? 0 : kToolHangWindowS * 1'000'000'000LL;
      if (hang_first_ns_ >= 0 && now - hang_first_ns_ >= window) {
        stopping_ = true;
        stop_reason_ = "hang established";
        hist_->harness("watchdog_stop",
                       {{"reason", "hang established"}, {"hang_s", s_.expect.hang_s}});
        request_fr_dumps("hang established");
        request_stack_dumps("hang established");
        io_.stop();
        return;
      }
    }
  }
  ticker_->expires_after(std::chrono::milliseconds(100));
  ticker_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

void Run::fail_fast(int64_t now) {
  if (first_failure_ns_ < 0 || stopping_ || restart_.pending() || running_ranks_.empty() ||
      launcher_traits().aborts_on_rank_failure) {
    return;
  }
  const double grace_s =
      std::max({10.0, s_.comm_timeout_ms / 1000.0 + 5.0, s_.rendezvous_timeout_ms / 1000.0 + 5.0});
  if (now - first_failure_ns_ < static_cast<int64_t>(grace_s * 1e9)) return;
  const std::vector<int> killed = launcher_->kill_ranks(*sup_, running_ranks_);
  hist_->harness("teardown_after_failure",
                 {{"failed_rank", first_failure_rank_}, {"grace_s", grace_s}, {"killed", killed}});
  first_failure_ns_ = -1;  // once per failure; a restart may start over
}

void Run::merge_local_files() {
  const auto got = ctl_->received();
  const auto drops = ctl_->dropped();
  for (int r = 0; r < s_.ranks; ++r) {
    // The rank wrote this file: it may be a FIFO, hold lines nested past any stack or longer than
    // memory. Each such line is counted with the history's refused events, never fatal.
    const std::string name = fmt::format("ranks/rank{}/events.jsonl", r);
    std::string why;
    const FileFd f = open_regular_file(dir_ + "/" + name, &why);
    if (!f && errno != ENOENT) hist_->refuse(fmt::format("{}: {}", name, why));
    LineReader in(kMaxEventLineBytes);
    std::string line;
    uint64_t late = 0, total = 0;
    auto it = got.find(r);
    for (LineReader::Got g; f && (g = in.next(f.get(), &line)) != LineReader::Got::kEnd;) {
      // A torn last line of a killed rank has no newline: the reader leaves it.
      if (g == LineReader::Got::kTooLong) {
        hist_->refuse(fmt::format("{}:{}: a line longer than {} bytes", name, in.line_number(),
                                  kMaxEventLineBytes));
        continue;
      }
      if (line.empty()) continue;
      HistoryEvent e;
      try {
        e = parse_json_line(line, EventLine::kRank);
      } catch (const std::exception& x) {  // JsonRefused, a field of the wrong type
        hist_->refuse(
            fmt::format("{}:{}: {}", name, in.line_number(), std::string(x.what()).substr(0, 200)));
        continue;
      }
      ++total;
      if (it != got.end() && it->second.count(e.seq)) continue;
      // As the rank wrote it (the history's check refuses a foreign rank or data that is not an
      // object); a line without a rank is this file's rank's.
      e.source = "rank";
      if (e.rank == -1) e.rank = r;
      e.late = true;
      hist_->append(std::move(e));
      ++late;
    }
    const auto d = drops.find(r);
    hist_->harness("telemetry",
                   {{"events_in_file", total},
                    {"streamed", it == got.end() ? 0 : it->second.size()},
                    {"recovered_from_file", late},
                    {"dropped_by_queue", d == drops.end() ? 0 : d->second}},
                   r);
  }
}

RunResult Run::go() {
  RunResult res;
  prepare();
  res.run_dir = dir_;
  // What killed runs left outside their run directories goes before this run adds its own
  // (residue.hpp: cgroups, shared memory of owners that are gone).
  if (const auto found = faults::sweep_residue(faults::default_residue_dirs(), false);
      !found.empty()) {
    hist_->harness("cleanup", faults::residue_json(found, false));
  }
  const bool live = o_.print_events && o_.print_summary;
  if (live) {
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
    // From here on SIGINT/SIGTERM end the run the orderly way (teardown, verdict `interrupted`);
    // a signal that comes before the I/O loop runs is handled as soon as it does.
    stop_signals_ = std::make_unique<boost::asio::signal_set>(io_, SIGINT, SIGTERM);
    stop_signals_->async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      stopping_ = true;
      stop_reason_ = "harness got " + signal_name(sig);
      hist_->harness("interrupted", {{"signal", signal_name(sig)}});
      request_stack_dumps(stop_reason_);  // an outer timeout's kill leaves evidence too
      io_.stop();
    });
    if (launcher_kind_ == LauncherKind::kSrun) {
      check_allocation();  // Slurm there, the allocation fits the topology (run_agents_srun.cpp)
    } else if (!s_.hosts.empty()) {
      check_hosts(s_);  // every host answers, or nothing is launched
    }
    if (!s_.prepare_yaml.empty()) run_preparation();
    start_control_plane();
    if (!s_.workload.fetch.empty()) start_artifact_hub();  // after the secret: the hub asks for it
    res.control_addr = ctl_addr_;
    if (live) {
      std::printf("  control    %s\n", ctl_addr_.c_str());
      std::fflush(stdout);
    }
    hist_->add_listener([this](const HistoryEvent& e) {
      if (e.source != "rank") return;
      if (e.kind == "step" || e.kind == "hello") {
        std::lock_guard lock(step_mu_);
        if (e.kind == "step") {
          auto& m = max_step_[e.rank];
          m = std::max(m, e.step);
          if (!progress_check_pending_.exchange(true)) {
            boost::asio::post(io_, [this] { check_progress(); });
          }
        } else {
          auto d = nlohmann::json::parse(e.data_json, nullptr, false);
          if (!d.is_discarded()) hello_pid_[e.rank] = d.value("pid", 0);
        }
      }
    });
    hist_->harness("run_start",
                   {{"run_id", id_},
                    {"scenario", s_.name},
                    {"fix", o_.fix},
                    {"ranks", s_.ranks},
                    {"nodes", s_.nodes},
                    {"layout", {{"dp", s_.dp}, {"tp", s_.tp}, {"pp", s_.pp}, {"zero", s_.zero}}},
                    {"launcher", s_.launcher},
                    {"backend", s_.backend},
                    {"seed", s_.seed},
                    {"control", ctl_addr_},
                    {"expect", {{"oracle", s_.expect.oracle}, {"symptom", s_.expect.symptom}}}});
    if (!s_.launcher_reason.empty()) {  // topology.launcher: auto chose it
      hist_->harness("launcher_choice",
                     {{"launcher", s_.launcher}, {"reason", s_.launcher_reason}});
    }
    for (auto& p : s_.plans) hist_->harness("fault_armed", {{"plan", p}, {"via", "scenario"}});
    if (o_.on_ready) o_.on_ready(ctl_addr_, dir_);
    sup_ = std::make_unique<Supervisor>(
        io_,
        [this](int rank, const std::string& name, const std::string& stream,
               const std::string& line) { on_line(rank, name, stream, line); },
        [this](const ExitInfo& x) { on_exit(x); });
    start_tools();
    start_baseline();
    master_port_ = free_port();
    faults_ = std::make_unique<OutOfProcessFaults>(s_, dir_, *hist_, *sup_);
    start_agents();  // topology.hosts: one agent per host, before any fault or rank
    faults_->prepare(master_port_);
    {
      auto host = launch_host();
      launcher_->prepare(host);
    }
    if (!stopping_) launch_all(s_.workload.resume ? dir_ + "/checkpoints" : "");
    timeout_ = std::make_unique<boost::asio::steady_timer>(io_);
    timeout_->expires_after(
        std::chrono::milliseconds(static_cast<int64_t>(s_.run_timeout_s * 1000)));
    timeout_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      stopping_ = true;
      stop_reason_ = fmt::format("run timeout ({} s)", s_.run_timeout_s);
      hist_->harness("run_timeout", {{"after_s", s_.run_timeout_s}});
      request_stack_dumps(stop_reason_);
      io_.stop();
    });
    ticker_ = std::make_unique<boost::asio::steady_timer>(io_);
    tick();
    io_.run();
    if (agents_ && !agents_->lost().empty()) raise<Error>("{}", agents_->lost());
  } catch (const std::exception& e) {
    res.harness_error = e.what();
    hist_->harness("harness_error", {{"message", e.what()}});
  }
  stopping_ = true;
  if (timeout_) timeout_->cancel();
  if (ticker_) ticker_->cancel();
  if (recovery_timer_) recovery_timer_->cancel();
  if (sup_) finish_baseline();
  if (sup_) drain_tools();
  if (faults_) faults_->heal(false);
  if (agents_) agents_->stop();  // healed through them; nothing of theirs outlives the run
  if (sup_) sup_->teardown(std::chrono::milliseconds(2000));
  if (faults_) faults_->heal(true);
  if (ctl_) ctl_->shutdown();
  if (probe_) probe_->poll(*hist_);  // what the probe wrote until the end
  if (ctl_) merge_local_files();
  if (const uint64_t n = hist_->rejected(); n > 0) {
    hist_->harness("events_rejected", {{"count", n}, {"first", hist_->rejected_reasons()}});
  }
  if (ctl_ && ctl_->rejected() > 0) {
    hist_->harness("control_rejected",
                   {{"calls", ctl_->rejected()}, {"why", "no or wrong secret"}});
  }
  hist_->harness("run_end", {{"reason", stop_reason_.empty() ? "all ranks ended" : stop_reason_},
                             {"restarts", restart_.restarts()}});
  hist_->flush();
  std::error_code ec;
  fs::remove_all(dir_ + "/tmp", ec);
  const auto history = hist_->events();
  res.verdict = judge(s_.expect, history);
  nlohmann::json v = res.verdict.to_json();
  v["state"] = "done";
  v["run_id"] = id_;
  v["scenario"] = s_.name;
  v["fix"] = o_.fix;
  if (!res.harness_error.empty()) v["harness_error"] = res.harness_error;
  v["rejected_events"] = hist_->rejected();
  v["warnings"] = plan_report(s_.plans, history).warnings;  // plans armed that never fired
  run_dir_.write_atomic("verdict.json",
                        v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  res.exit_code = !res.harness_error.empty() ? 2 : outcome_exit_code(res.verdict.outcome);
  print_summary(res, history);
  return res;
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
  // Below, what the harness's own machine must have (with hosts or srun the ranks' machines do).
  if (!scenario.hosts.empty() || scenario.launcher == "srun") return;
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
  for (const auto& f : scenario.oop_faults) {
    try {
      if (f->kind == "memory_limit") {
        faults::check_cgroup_root(faults::memory_cgroup_root(), "FAULTLINE_CGROUP_ROOT", f->kind);
      } else if (f->kind == "cpu_quota") {
        faults::check_cgroup_root(faults::cpu_cgroup_root(), "FAULTLINE_CPU_CGROUP_ROOT", f->kind);
      }
    } catch (const Error& e) {
      throw ScenarioError(fmt::format("{}: faults[].{}", scenario.file, e.what()));
    }
  }
}

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  check_runnable_here(scenario);
  if (scenario.launcher == "mpirun" &&
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
  for (int r = 0; r < s.ranks; ++r) {
    const std::string log = fmt::format("{}/ranks/rank{}/fired.jsonl", run_dir, r);
    if (!fs::exists(log)) continue;
    for (auto& rec : fault::read_fired_log(log)) fired.push_back(std::move(rec));
  }
  s.plans.clear();
  if (!fired.empty()) s.plans.push_back(fault::replay_plan(fired));
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
