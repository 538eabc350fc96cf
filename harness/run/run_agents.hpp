// The per-host agents of a run (harness/agent/hub.hpp): over topology.hosts one per host, started
// through the rsh agent (run_agents.cpp); with launcher srun one per node of the allocation,
// checked before anything starts, as one job step of their own (run_agents_srun.cpp). They come
// up once the supervisor exists and before any fault is set up or rank launched; a lost agent
// ends the run. Over topology.hosts each host's ranks stream their telemetry to their agent, which
// relays it to the control plane (agent/relay.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace fl {
class DirFd;
}

namespace fl::harness {

class AgentHub;
class Controller;
class EventLoop;
class History;
class OutOfProcessFaults;
class Supervisor;
struct RunOptions;
struct Scenario;
struct SlurmAllocation;

class RunAgents {
 public:
  // `stopping` says the run is ending; `stop_run(why)` ends it (on the loop's thread).
  RunAgents(const Scenario& s, const RunOptions& o, const std::string& dir, const DirFd& run_dir,
            History& hist, EventLoop& loop, std::function<bool()> stopping,
            std::function<void(const std::string&)> stop_run);
  ~RunAgents();

  // launcher srun: Slurm is there and the allocation fits the topology (recorded), or Error.
  void check_allocation();
  // launcher mpirun over topology.hosts inside a Slurm allocation whose nodes they are (and no
  // rsh agent of the scenario's): the agents will start as a job step (srun --overlap, one per
  // host), not through ssh; recorded. False (the hosts are reached through the rsh agent) else.
  bool use_allocation();
  // With launcher srun or topology.hosts: the agents' hub, a service of `ctl` (before it starts);
  // over topology.hosts the ranks' telemetry and commands go through it.
  void attach(Controller& ctl, const std::string& secret);
  bool attached() const { return hub_ != nullptr; }
  // Starts the agents and waits until each attached; the faults act through them from then on.
  void start(Supervisor& sup, OutOfProcessFaults& faults, const std::string& control_addr);
  // Where node `node`'s ranks send their telemetry: its agent's relay, or the control plane.
  std::string rank_control_addr(int node, const std::string& control_addr) const;
  std::string lost() const;  // "" while all is well
  void stop();

 private:
  void start_srun(Supervisor& sup, const std::string& exe, const std::string& control_addr);
  std::function<bool()> poll();
  std::function<void(const std::string&)> lost_handler();

  const Scenario& s_;
  const RunOptions& o_;
  const std::string& dir_;
  const DirFd& run_dir_;
  History& hist_;
  EventLoop& loop_;
  std::function<bool()> stopping_;
  std::function<void(const std::string&)> stop_run_;
  std::unique_ptr<SlurmAllocation> slurm_;
  std::unique_ptr<AgentHub> hub_;
  bool relaying_ = false;       // ranks stream to their host's agent (not with launcher srun)
  bool srun_launcher_ = false;  // slurm_ is launcher srun's (else mpirun's inside an allocation)
};

}  // namespace fl::harness
