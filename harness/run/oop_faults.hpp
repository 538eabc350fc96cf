// Out-of-process faults: what the harness does to a run from outside its processes. Signals at a
// step, launch-environment tampering, a squatted port, damaged files in the run directory, a
// filesystem that fills up, a memory limit that brings the kernel's OOM killer, network faults
// between simulated nodes, a library hidden from a rank.
//
// Every fault has an idempotent inject and heal, and everything it creates dies with the run:
// network namespaces and the mount namespace are held by `unshare ... sleep` processes that the
// supervisor starts with a parent-death signal, so even a SIGKILLed harness leaves no namespace,
// rule or mount behind; cgroups (which outlive their processes) are named after the harness pid
// and swept by the next run when that pid is gone.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/scenario/scenario.hpp"

namespace fl::harness {

class History;
class Supervisor;
struct ProcessSpec;

// Runs argv (no shell) and waits; throws Error with its output when it fails.
std::string run_tool(const std::vector<std::string>& argv);

// Removes cgroups left by harnesses that are gone (their pid is in the name); returns how many.
int sweep_stale_cgroups();

class OutOfProcessFaults {
 public:
  OutOfProcessFaults(const Scenario& s, std::string run_dir, History& hist, Supervisor& sup);
  ~OutOfProcessFaults();

  // Before launch: namespaces, cgroups, small filesystems, plugin directories, the port squat,
  // environment changes and every fault `at: launch`.
  void prepare(int master_port);
  bool uses_namespaces() const { return !node_holders_.empty(); }
  // Where ranks reach the store: 127.0.0.1, or node 0's address inside the namespaces.
  std::string master_addr() const;
  // A rank's process: namespaces to enter, cgroup, environment (plugin path, MPI interfaces,
  // environment faults).
  void adjust_rank(int rank, ProcessSpec& spec, std::map<std::string, std::string>& env) const;
  // A helper the ranks must reach over the data-plane network (ompi-server).
  void adjust_helper(ProcessSpec& spec, std::map<std::string, std::string>& env) const;
  // Step-triggered faults, given each rank's last reported step and its pid (0: unknown).
  // Returns true when a fault asks for a restart from the latest checkpoint.
  bool on_progress(const std::map<int, int64_t>& max_step, const std::function<pid_t(int)>& pid_of,
                   const std::function<bool(int)>& is_local_child);
  // Faults `at: exit`, once every rank has ended; true: restart requested.
  bool on_all_exited();
  // Records what the kernel says about a rank that ended (OOM kills in its memory cgroup).
  void on_rank_exit(int rank);
  // Heals everything still injected (idempotent, never throws). Before teardown: rules, rate
  // limits, mounts, the port, files. After teardown (`processes_gone`): cgroups, and checks that
  // the namespaces died with their holders.
  void heal(bool processes_gone);
  const std::vector<std::string>& injected() const { return injected_; }

 private:
  struct Cgroup;
  void setup_namespaces();
  void setup_mounts();
  void setup_cgroups();
  void setup_plugins();
  bool apply(size_t i, const std::string& when);  // true: restart requested
  void inject_file(const OutOfProcessFault& f);
  void inject_network(const OutOfProcessFault& f);
  std::vector<std::string> in_net(int node, std::vector<std::string> argv) const;
  pid_t spawn_holder(const std::string& name, const std::vector<std::string>& unshare_args);

  const Scenario& s_;
  std::string dir_;
  History& hist_;
  Supervisor& sup_;
  int master_port_ = 0;
  int squat_fd_ = -1;
  pid_t hub_ = 0, mount_holder_ = 0;
  std::vector<pid_t> node_holders_;
  std::map<int, std::unique_ptr<Cgroup>> cgroups_;
  std::vector<std::string> mounts_;             // paths mounted in the mount namespace
  std::map<std::string, std::string> backups_;  // damaged file -> pristine copy
  std::vector<int> rules_in_;                   // nodes with FAULTLINE rules
  std::vector<int> shaped_;                     // nodes with a tbf qdisc
  std::vector<bool> done_;                      // per fault: applied
  std::vector<std::string> injected_;
  bool healed_ = false;
};

}  // namespace fl::harness
