// The state of one run while it goes, shared by runner.cpp (prepare, launch, supervise, judge)
// and run_control.cpp (Control actions, tools beside the run, restarts). Internal to the harness.
#pragma once

// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>

#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/private_dir.hpp"
#include "harness/agent/hub.hpp"
#include "harness/run/artifact_server.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/run/live.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/run/restart_policy.hpp"
#include "harness/run/runner.hpp"
#include "harness/launch/slurm_alloc.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/launch/tools.hpp"

namespace fl::harness::detail {

class Run {
 public:
  Run(const Scenario& s, const RunOptions& o)
      : s_(with_recovery_launcher(s, o.recovery)),
        o_(o),
        launcher_kind_(launcher_kind(s_.launcher)),
        launcher_(launcher_info(launcher_kind_).make()) {}

  RunResult go();

 private:
  void prepare();
  void launch_all(const std::string& resume_from);
  LaunchHost launch_host();  // what the launcher may use (after the supervisor and faults exist)
  void run_preparation();
  void start_artifact_hub();
  // run_side.cpp: the after_prepare command and the baseline oracle's reference run.
  void run_after_prepare();
  void start_baseline();
  void on_baseline_exit(const ExitInfo& x);
  void finish_baseline();
  pid_t baseline_pid_ = 0;
  bool baseline_exited_ = false;
  double baseline_wait_s_ = 0;
  std::unique_ptr<ArtifactServer> artifacts_;
  std::string artifact_url_;
  std::map<std::string, std::string> rank_env(int rank);
  // The telemetry relay through the per-host agents (run_agents.cpp).
  void relay_through_agents();
  std::string rank_control_addr(int node) const;
  void on_line(int rank, const std::string& name, const std::string& stream,
               const std::string& line);
  void on_exit(const ExitInfo& x);
  void tick();
  void check_progress();
  std::atomic<bool> progress_check_pending_{false};
  ControlResult control(const ControlAction& a);
  ControlResult control_on_io(const ControlAction& a);
  // One handler per control action, dispatched by name from a table (run_control.cpp).
  struct ControlReply;
  struct ControlEntry;
  static const std::vector<ControlEntry>& control_actions();
  ControlResult kill_rank(const ControlAction& a, ControlReply& r);
  ControlResult restart_rank(const ControlAction& a, ControlReply& r);
  ControlResult restart_job(const ControlAction& a, ControlReply& r);
  ControlResult abort_run(const ControlAction& a, ControlReply& r);
  ControlResult list_faults(const ControlAction& a, ControlReply& r);
  ControlResult send_faults(const ControlAction& a, ControlReply& r);
  ControlResult dump_flight_recorder(const ControlAction& a, ControlReply& r);
  void all_ranks_ended();
  void finish_teardown();
  void merge_local_files();
  void print_header(bool with_files = true);
  void print_summary(const RunResult& r, const std::vector<HistoryEvent>& history);
  std::string steps_line(const std::vector<HistoryEvent>& history);
  std::string verdict_line(const RunResult& r);
  pid_t rank_pid(int rank);

  void start_tools();
  void drain_tools();
  bool reshard_for_restart(int dp, std::string& from, std::string& error);

  Scenario s_;  // a copy: a restart may change the data-parallel size and the worker arguments
  const RunOptions& o_;
  std::vector<ToolCommand> tools_;
  std::map<pid_t, std::string> tool_pids_;  // running tools
  RestartPolicy restart_;  // what happens once every rank has ended (restart_policy.hpp)
  std::unique_ptr<boost::asio::steady_timer> recovery_timer_;
  std::string dir_, id_;
  DirFd run_dir_;  // dir_, opened once right after its mkdir: the harness's files go through it
  // What the hang watchdog judges: the history's summary, kept up to date by a listener on the
  // history (declared before it: the history, and what appends to it while it is destroyed,
  // must not outlive the summary).
  std::mutex summary_mu_;
  RunSummary summary_;
  std::unique_ptr<History> hist_;
  // topology.hosts: the per-host agents (run_agents.cpp); a service of ctl_'s server, which
  // must go first.
  std::unique_ptr<AgentHub> agents_;
  void start_agents();
  std::function<bool()> agent_poll();
  std::function<void(const std::string&)> agent_lost_handler();
  // launcher srun: the allocation, checked before anything starts; its agents' step
  // (run_agents_srun.cpp).
  std::optional<SlurmAllocation> slurm_;
  void check_allocation();
  void start_srun_agents(const std::string& exe);
  std::unique_ptr<Controller> ctl_;
  std::string ctl_addr_;
  std::string secret_;  // the control plane's credential (RUN_DIR/control.secret)
  void start_control_plane();
  boost::asio::io_context io_;
  std::unique_ptr<Supervisor> sup_;
  std::unique_ptr<boost::asio::steady_timer> timeout_, ticker_;
  std::unique_ptr<boost::asio::signal_set> stop_signals_;
  int master_port_ = 0;
  std::unique_ptr<OutOfProcessFaults> faults_;
  LauncherKind launcher_kind_;
  std::unique_ptr<Launcher> launcher_;  // starts the ranks (launch_local.cpp, launch_mpirun.cpp)
  const LauncherInfo& launcher_traits() const { return launcher_info(launcher_kind_); }
  std::set<int> running_ranks_;
  std::map<int, std::ofstream> logs_;
  LiveState live_;
  bool stopping_ = false;
  bool relaying_ = false;  // ranks stream to their host's agent (relay_through_agents)
  std::string stop_reason_;
  std::mutex step_mu_;
  std::map<int, int64_t> max_step_;  // from telemetry
  std::map<int, pid_t> hello_pid_;
  std::vector<std::string> live_plans_;
  std::vector<std::string> injected_;  // one line per injected fault, for the summary
  int64_t last_hang_check_ = 0;
  int64_t hang_first_ns_ = -1;  // when the hang watchdog saw the expected hang
  static constexpr int64_t kToolHangWindowS = 10;
  // Fail-fast: when a rank fails on its own, the survivors get a grace period to report their
  // own view (a timeout, a missing peer), then the job is torn down, as torchrun's agent does.
  int64_t first_failure_ns_ = -1;
  int first_failure_rank_ = -1;
  void fail_fast(int64_t now);
  // Asks every live rank (or `rank` alone) for a flight-recorder dump (SIGUSR2), waits up to 2 s
  // for them and records a `flight_recorder_dump` event with `reason` (run_frdump.cpp); called
  // when the hang watchdog stops the run and by the dump_flight_recorder control action.
  struct FrDumps {
    std::vector<int> signalled, dumped, frozen, missing;
    std::vector<int> not_taking;  // no live process that takes SIGUSR2 for this rank
  };
  FrDumps request_fr_dumps(const std::string& reason, int rank = -1);
  // Threads of every live rank (threads.txt) and the Python stacks of ranks whose probe takes
  // SIGUSR1 (stacks.txt), at most 2 s (run_stacks.cpp); when the hang watchdog or the run
  // timeout gives up on the job.
  void request_stack_dumps(const std::string& why);

  // workload.kind: command (run_command.cpp; the ranks start in launch_command.cpp): the
  // probe's files read as they grow, which ranks have sent an event since the launch.
  void begin_command_launch();
  bool rank_reported(int rank);
  std::string command_shown(int rank);  // the command a rank was launched with (its launch event)
  void check_command_exit(const ExitInfo& x);
  void poll_command();
  std::unique_ptr<ProbeIngest> probe_;
  std::set<int> reported_;                // under step_mu_
  std::map<int, std::string> last_line_;  // each rank's last output line (-1: the launcher)
  int64_t launched_ns_ = 0;
};

}  // namespace fl::harness::detail
