// Launchers: how a run's ranks become processes (in the spirit of torch elastic's PContext). The
// runner owns supervision, restarts and control actions; a launcher only starts the ranks of one
// incarnation, says which processes are its own and how their ends are attributed, and stops them.
//
// A new launcher: one line in FAULTLINE_LAUNCHERS below, its file `launch_NAME.cpp` (a Launcher
// subclass and `NAME_launcher()` returning its LauncherInfo), and the file in LAUNCHER_SOURCES
// (harness/CMakeLists.txt). `topology.launcher`, its allowed values and `faultline keys` follow.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/private_dir.hpp"
#include "base/settings.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

FAULTLINE_SETTING(kMpiStart, std::string, "FAULTLINE_MPI_START", "auto",
                  "How the local launcher starts an MPI world: auto (direct launch through the "
                  "harness's PMIx server unless the run needs MPI singletons) or singleton (every "
                  "world, so that restart_rank can start one rank again)");

class History;
class Supervisor;
class OutOfProcessFaults;

// X(enum value, topology.launcher name), in the order docs/scenarios.md lists them.
#define FAULTLINE_LAUNCHERS(X) \
  X(kLocal, local)             \
  X(kMpirun, mpirun)           \
  X(kCommand, command)         \
  X(kSrun, srun)               \
  X(kDeepspeed, deepspeed)

enum class LauncherKind {
#define FAULTLINE_LAUNCHER_ENUM(e, name) e,
  FAULTLINE_LAUNCHERS(FAULTLINE_LAUNCHER_ENUM)
#undef FAULTLINE_LAUNCHER_ENUM
};

// What a launcher may use while it starts ranks. Built by the runner for each call.
struct LaunchHost {
  const Scenario& s;          // the current incarnation's (a resharding restart changes ranks)
  const std::string& dir;     // the run directory
  const std::string& secret;  // the control plane's credential (never written to a file)
  History& hist;
  Supervisor& sup;
  const OutOfProcessFaults& faults;  // adjust_rank / adjust_helper
  // A rank's environment as the run sets it (identity, control plane, plans, scenario variables).
  std::function<std::map<std::string, std::string>(int rank)> rank_env;
  // The runner counts the rank as running (call once per rank started).
  std::function<void(int rank)> started;
  // Runs pending I/O (process output, exits) while a launcher waits for a helper to come up.
  std::function<void()> poll;
  // `dir` opened once: files the launcher writes there (appfile, multiprog) go through it.
  const DirFd* run_dir = nullptr;
  // The run's recovery tool (RunOptions::recovery, else the scenario's): a policy name or a
  // command line; "" for none. The local launcher keeps MPI singletons for a tool of the run's
  // own, which may restart ranks one by one.
  std::string recovery;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual LauncherKind kind() const = 0;

  // Once, before the first start: helper processes the ranks need (an ompi-server for MPI
  // singletons). Throws Error when one does not come up.
  virtual void prepare(LaunchHost&) {}
  // Variables the launcher adds to a rank's environment (before the scenario's own `env:`).
  virtual void add_env(int /*rank*/, std::map<std::string, std::string>& /*env*/) const {}
  // Starts every rank of one incarnation with the worker command `args`; records one `launch`
  // history event per rank and calls host.started(rank) for each. Forgets the previous
  // incarnation's processes.
  virtual void start(LaunchHost& host, const std::vector<std::string>& args) = 0;
  // Starts one rank again on its own (control action restart_rank). Only launchers whose info
  // says rank_processes; returns its pid.
  virtual pid_t start_rank(LaunchHost& host, int rank, const std::vector<std::string>& args);

  // The pid of `rank` when the harness spawned it itself (signals go to its process group);
  // 0 otherwise (a rank under mpirun: the runner uses the pid from the rank's `hello`).
  virtual pid_t rank_pid(int /*rank*/) const { return 0; }
  // Exit attribution. The launcher's own job process (mpirun): its end ends every rank that has
  // not reported an exit of its own. Empty name / false: every rank is its own process.
  virtual std::string job_process_name() const { return ""; }
  virtual bool is_job_process(pid_t /*pid*/) const { return false; }
  virtual void job_process_ended() {}

  // Fail-fast (launchers that do not abort the job themselves): kills `ranks`' processes as the
  // harness's doing; returns the ranks it signalled.
  virtual std::vector<int> kill_ranks(Supervisor& sup, const std::set<int>& ranks);
  // restart_job: kills every process of the incarnation (the ranks' ends come back as exits).
  virtual void stop(Supervisor& sup) = 0;
};

struct LauncherInfo {
  LauncherKind kind;
  std::string name;     // topology.launcher
  std::string summary;  // one phrase for the schema: what it runs
  // Each rank is a process the harness spawns itself: restart_rank, resharding restarts and the
  // faults that act on one rank's process (network namespaces, cgroups) work with it.
  bool rank_processes = false;
  // It tears the whole job down itself once a rank fails (mpirun); else the runner's fail-fast
  // does after a grace period.
  bool aborts_on_rank_failure = false;
  std::function<std::unique_ptr<Launcher>()> make;
};

#define FAULTLINE_LAUNCHER_DECLARE(e, name) const LauncherInfo& name##_launcher();
FAULTLINE_LAUNCHERS(FAULTLINE_LAUNCHER_DECLARE)
#undef FAULTLINE_LAUNCHER_DECLARE

// Every launcher in FAULTLINE_LAUNCHERS order; lookups.
const std::vector<const LauncherInfo*>& launchers();
const LauncherInfo& launcher_info(LauncherKind kind);
// The kind named `name`; throws ScenarioError naming the allowed values when there is none.
LauncherKind launcher_kind(const std::string& name);
std::vector<std::string> launcher_names();
// Whether the launcher named `name` spawns each rank itself (LauncherInfo::rank_processes); what
// faults on one rank's process (namespaces, cgroups) require. Throws as launcher_kind.
bool launcher_has_rank_processes(const std::string& name);
// The names of the launchers whose ranks are the harness's own processes, joined with " or "
// (for errors: "needs topology.launcher: local").
std::string rank_process_launchers();

// workload.command's program as exec would look for it with the scenario's PATH (its env, else
// the harness's): why it cannot be started, or "" (also when only the run can tell: a program
// under {run_dir} or relative to the rank's directory). launch_command.cpp.
std::string command_program_problem(const Scenario& s);

}  // namespace fl::harness
