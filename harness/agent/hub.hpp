// The harness's side of the per-host agents (`faultline agent`, docs/cluster.md): with
// topology.hosts it starts one agent per host through the rsh agent before the ranks, waits until
// each has attached to the control plane (Agents.Attach, the run's secret), and from then on runs
// the faults' tools and signals on that host through it. Every agent's registration, loss and stop
// is a history event; a lost agent ends the run with an error, and no call waits forever.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/faults/sandbox.hpp"

namespace grpc {
class Service;
}
namespace faultline::v1 {
class EventBatch;
class WorkerCommand;
}  // namespace faultline::v1

namespace fl::harness {

class History;
class Supervisor;
struct Scenario;

class AgentHub : public faults::HostAgents {
 public:
  AgentHub(const Scenario& s, std::string run_dir, History& hist, std::string secret);
  // Agents that register as `hosts` (node k: hosts[k]) instead of topology.hosts: with launcher
  // srun and no hosts, the allocation's nodes (harness/run/run_agents_srun.cpp).
  AgentHub(const Scenario& s, std::vector<std::string> hosts, std::string run_dir, History& hist,
           std::string secret);
  ~AgentHub() override;

  // Registered on the control plane's server before it starts.
  grpc::Service* service();
  // Starts `exe agent ...` on every host through the rsh agent and waits (calling `poll` between
  // looks; false: the run is stopping) until each attached; Error naming every host whose agent
  // did not within the limit.
  // `on_lost` runs (on a gRPC thread) when an agent goes away before stop().
  // `allow_shared_results`: the agents accept a run directory under a shared one (the harness
  // was given --allow-shared-results).
  void start(Supervisor& sup, const std::string& exe, const std::string& control_addr,
             const std::function<bool()>& poll, std::function<void(const std::string&)> on_lost,
             bool allow_shared_results = false);
  // For agents the caller started (one srun step for all): waits until each host's agent
  // attached, while `alive(node)` says what started it still runs; Error as start() says.
  void wait_attached(const std::function<bool(size_t)>& alive, const std::string& control_addr,
                     const std::function<bool()>& poll,
                     std::function<void(const std::string&)> on_lost,
                     std::chrono::steady_clock::time_point t0);
  // Asks every agent to stop and waits (bounded) for each to go; records agent_stopped.
  void stop();
  // What went wrong with the agents ("" while all is well): a loss, in words.
  std::string lost() const;

  bool up(int node) const override;
  std::string run(int node, const std::vector<std::string>& argv) override;
  bool signal(int node, int rank, pid_t pid, int sig, std::string& why) override;
  void on_loss(int node, const std::vector<std::string>& argv) override;
  nlohmann::json apply(int node, const google::protobuf::Any& request) override;

  // The telemetry relay (relay.hpp): relayed batches go to `ingest` (set before start()), on the
  // agent's gRPC thread, in the order the agent read them.
  void relay_to(std::function<void(const faultline::v1::EventBatch&)> ingest);
  // Where host `node`'s ranks send their telemetry: its agent's relay address, or "" (relay off
  // by FAULTLINE_AGENT_RELAY, or the agent has none): the control plane then.
  std::string relay_addr(int node) const;
  // A command for rank `rank` (-1: every rank) on its relayed stream; how many ranks took it.
  int command_ranks(int rank, const faultline::v1::WorkerCommand& worker);
  int count() const override;
  std::string name(int node) const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The control plane listens beyond loopback (a HOST:PORT that is not 127.x, ::1 or localhost)
// only for a run over topology.hosts; Error otherwise. A unix socket is always fine.
void check_control_reach(const Scenario& s, const std::string& addr);

// The argv that starts host `node`'s agent through the rsh agent (words checked: a shell on the
// host reads them).
std::vector<std::string> agent_command(const Scenario& s, int node, const std::string& exe,
                                       const std::string& control_addr, const std::string& dir);

// `exe agent --control ADDR --host HOST --run-dir DIR`, every word checked to be plain (Error
// otherwise): what agent_command runs through the rsh agent, and srun's agents' step.
std::vector<std::string> agent_words(const std::string& host, const std::string& exe,
                                     const std::string& control_addr, const std::string& dir);

}  // namespace fl::harness
