// Drives a run's out-of-process faults (harness/faults/: one file per kind) through the run's
// lifecycle: set-up before launch, changes to each rank's launch, injection at launch, at a step
// or once every rank has ended, rank exits, and healing. Everything a fault creates dies with the
// run (see harness/faults/sandbox.hpp).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

class History;
class Supervisor;
struct ProcessSpec;

class OutOfProcessFaults {
 public:
  OutOfProcessFaults(const Scenario& s, std::string run_dir, History& hist, Supervisor& sup);
  ~OutOfProcessFaults();

  // Before launch: namespaces, then every fault's set-up, then the faults `at: launch`.
  void prepare(int master_port);
  // With topology.hosts: the hosts' agents run the faults' tools and signals there.
  void use_agents(faults::HostAgents* a) { box_.set_agents(a); }
  bool uses_namespaces() const { return box_.has_network(); }
  std::string master_addr() const { return box_.master_addr(); }
  // The run's hub namespace ("" without one) and the address the ranks reach in it.
  std::string hub_netns() const { return box_.hub_netns(); }
  std::string hub_addr() const { return faults::Sandbox::hub_addr(); }
  // A rank's process: namespaces, plugin path, and every fault's change to its launch. `unset`
  // gets the variables faults removed from env.
  void adjust_rank(int rank, ProcessSpec& spec, std::map<std::string, std::string>& env,
                   std::vector<std::string>* unset = nullptr) const;
  // A helper the ranks must reach over the data-plane network (mpirun, ompi-server).
  void adjust_helper(ProcessSpec& spec, std::map<std::string, std::string>& env) const {
    box_.adjust_helper(spec, env);
  }
  // A helper that belongs on one node (a command's launcher per node, torchrun --node_rank):
  // that node's network namespace.
  void adjust_node_helper(int node, ProcessSpec& spec,
                          std::map<std::string, std::string>& env) const {
    box_.adjust_node(node, spec, env);
  }
  // Step-triggered faults, given each rank's last reported step and its pid (0: unknown).
  // Returns true when a fault asks for a restart from the latest checkpoint.
  bool on_progress(const std::map<int, int64_t>& max_step, const std::function<pid_t(int)>& pid_of,
                   const std::function<bool(int)>& is_local_child);
  // Faults `at: exit`, once every rank has ended; true: restart requested.
  bool on_all_exited();
  void on_rank_exit(int rank);
  // Before a rank_exit the harness made up from the launcher's end: what faults know of it.
  void explain_exit(int rank, nlohmann::json& exit);
  // Heals everything still injected (idempotent, never throws), in reverse order. Before
  // teardown: rules, rate limits, mounts, the port, files; after it (`processes_gone`): cgroups,
  // and a check that the namespaces died with their holders.
  void heal(bool processes_gone);
  const std::vector<std::string>& injected() const { return injected_; }

 private:
  bool inject(size_t i, const faults::Progress* p, faults::When now);  // true: restart

  const Scenario& s_;
  std::string dir_;
  History& hist_;
  faults::Sandbox box_;
  std::vector<std::string> injected_;
  faults::Host host_;
  std::vector<std::unique_ptr<faults::Fault>> faults_;
  std::vector<bool> done_;
  bool healed_ = false;
};

}  // namespace fl::harness
