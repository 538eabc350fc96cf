// One run while it goes: `Run` wires the objects a run is made of, each with its own state and
// file — the event loop (event_loop.hpp), the watchdogs (watchdogs.hpp), the side runs
// (run_side.hpp: preparation, after_prepare, baseline), the tools beside the run (run_tools.hpp),
// the command probe (command_probe.hpp), the per-host agents (run_agents.hpp) and the dumps asked
// of ranks (rank_dumps.hpp) — and keeps what they share: the scenario, the run directory, the
// history, the control plane, the supervisor, the launcher and the ranks that run. runner.cpp
// prepares, launches, supervises and judges; run_control.cpp answers control actions;
// run_output.cpp prints. No Boost.Asio, gRPC or protobuf here. Internal to the harness.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/private_dir.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/run/event_loop.hpp"
#include "harness/run/live.hpp"
#include "harness/run/restart_policy.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {
class ArtifactServer;
class CommandProbe;
class JobStatusBuilder;
class MetricsEndpoint;
class OutOfProcessFaults;
class RunAgents;
class RunTools;
class SideRuns;
class Supervisor;
class Watchdogs;
struct DumpTargets;
struct ExitInfo;
}  // namespace fl::harness

namespace fl::harness::detail {

class Run {
 public:
  Run(const Scenario& s, const RunOptions& o);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  RunResult go();

 private:
  // runner.cpp: prepare, launch, supervise, judge.
  void prepare();
  void start_run();  // from the checks before anything starts to the first launch
  void record_run_start();
  void watch_ranks();  // the history listener that follows steps and hellos
  void arm_timers();
  void finish(RunResult& res);  // teardown, the late events, the verdict
  void launch_all(const std::string& resume_from);
  LaunchHost launch_host();  // what the launcher may use (after the supervisor and faults exist)
  std::map<std::string, std::string> rank_env(int rank);
  void start_control_plane();
  void start_artifact_hub();
  void start_metrics_endpoint();  // run_metrics.cpp: --metrics-port / --metrics-listen
  void on_line(int rank, const std::string& name, const std::string& stream,
               const std::string& line);
  void on_exit(const ExitInfo& x);
  void job_process_ended(const ExitInfo& x, nlohmann::json d);
  void tick();
  void check_progress();
  void fail_fast();
  void all_ranks_ended();
  void merge_local_files();
  pid_t rank_pid(int rank);
  DumpTargets dump_targets();
  // Ends the run with `why` unless it is ending already (on the loop's thread).
  void stop_run(const std::string& why);

  // run_control.cpp: one handler per control action, dispatched by name from a table.
  ControlResult control(const ControlAction& a);
  ControlResult control_on_io(const ControlAction& a);
  struct ControlReply;
  struct ControlEntry;
  static const std::vector<ControlEntry>& control_actions();
  friend std::vector<std::string> fl::harness::control_action_names();
  ControlResult kill_rank(const ControlAction& a, ControlReply& r);
  ControlResult restart_rank(const ControlAction& a, ControlReply& r);
  ControlResult restart_job(const ControlAction& a, ControlReply& r);
  ControlResult abort_run(const ControlAction& a, ControlReply& r);
  ControlResult list_faults(const ControlAction& a, ControlReply& r);
  ControlResult send_faults(const ControlAction& a, ControlReply& r);
  ControlResult dump_flight_recorder(const ControlAction& a, ControlReply& r);
  bool reshard_for_restart(int dp, std::string& from, std::string& error);

  // run_output.cpp: what `faultline run` prints.
  void print_header(bool with_files = true);
  void print_summary(const RunResult& r, const std::vector<HistoryEvent>& history);
  std::string steps_line(const std::vector<HistoryEvent>& history);
  std::string verdict_line(const RunResult& r);

  Scenario s_;  // a copy: a restart may change the data-parallel size and the worker arguments
  const RunOptions& o_;
  LauncherKind launcher_kind_;
  std::unique_ptr<Launcher> launcher_;  // starts the ranks (launch_local.cpp, launch_mpirun.cpp)
  const LauncherInfo& launcher_traits() const { return launcher_info(launcher_kind_); }
  RestartPolicy restart_;  // what happens once every rank has ended (restart_policy.hpp)

  // The run directory: dir_, opened once right after its mkdir (the harness's files go through
  // run_dir_).
  std::string dir_, id_;
  DirFd run_dir_;
  // First the loop, last its users: timers and the supervisor go before it.
  EventLoop loop_;
  LoopTimer timeout_{loop_}, ticker_{loop_}, recovery_timer_{loop_};
  // What follows the history through a listener is declared before it: the history, and what
  // appends to it while it is destroyed, must not outlive them.
  std::unique_ptr<Watchdogs> watch_;
  std::unique_ptr<CommandProbe> command_;     // workload.kind: command
  std::unique_ptr<JobStatusBuilder> status_;  // the live job status, for the /metrics endpoint
  std::unique_ptr<History> hist_;
  std::unique_ptr<SideRuns> side_;
  std::unique_ptr<RunTools> tools_;
  // A short way to the run directory for the control socket when RUN_DIR/control.sock is too long
  // for one (declared before ctl_: the server stops before its path goes).
  ShortLinkDir ctl_link_;
  // The control plane and its credential (RUN_DIR/control.secret); the agents are a service of
  // its server, which must go first.
  std::unique_ptr<Controller> ctl_;
  std::string ctl_addr_;
  std::string secret_;
  std::unique_ptr<RunAgents> agents_;
  std::unique_ptr<ArtifactServer> artifacts_;
  std::string artifact_url_;
  // The live /metrics endpoint (it reads status_ and hist_: it goes before them).
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::string metrics_addr_;
  std::unique_ptr<Supervisor> sup_;
  std::unique_ptr<OutOfProcessFaults> faults_;
  int master_port_ = 0;

  // The ranks: which run (on the loop's thread), their logs, their steps and hellos (from the
  // history's listeners, under step_mu_).
  std::set<int> running_ranks_;
  std::map<int, std::ofstream> logs_;
  std::mutex step_mu_;
  std::map<int, int64_t> max_step_;
  std::map<int, pid_t> hello_pid_;
  std::atomic<bool> progress_check_pending_{false};

  LiveState live_;
  bool stopping_ = false;
  std::string stop_reason_;
  std::vector<std::string> live_plans_;
  std::vector<std::string> injected_;  // one line per injected fault, for the summary
};

}  // namespace fl::harness::detail
