// The namespaces a run's faults need, owned by the run: an isolated network (a bridge in a hub
// namespace, one namespace per simulated node with its own address and an iptables chain that
// network faults fill) and a mount namespace every rank shares (small filesystems).
//
// Namespaces are held by `unshare ... sleep` processes that the supervisor starts with a
// parent-death signal, so even a SIGKILLed harness leaves no namespace, rule or mount behind.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/subprocess.hpp"
#include "harness/faults/on_nodes.hpp"

namespace google::protobuf {
class Any;
}

namespace fl::harness {
class History;
class Supervisor;
struct ProcessSpec;
struct Scenario;
}  // namespace fl::harness

namespace fl::harness::faults {

// The per-host agents (harness/agent/hub.hpp) as faults use them: a tool run on a host, a signal
// to a rank's pid there. Without agents (or once one is lost) the rsh agent runs the tools.
class HostAgents {
 public:
  virtual ~HostAgents() = default;
  virtual bool up(int node) const = 0;
  // Runs argv on host `node` through its agent: the output, or Error as run_tool throws it.
  virtual std::string run(int node, const std::vector<std::string>& argv) = 0;
  // Signals `pid` on host `node` once its agent found it is `rank` of this run; false with `why`.
  virtual bool signal(int node, int rank, pid_t pid, int sig, std::string& why) = 0;
  // argv the agent on `node` runs should it lose the harness (removing the run's chain).
  virtual void on_loss(int node, const std::vector<std::string>& argv) = 0;
  // Has host `node`'s agent apply a fault kind's typed request (on_nodes.hpp): its report of
  // what it did, or Error with its reason.
  virtual nlohmann::json apply(int node, const google::protobuf::Any& request);
  // How many agents there are (one per host, or with launcher srun one per node), and agent
  // `node`'s name (its host, or its node).
  virtual int count() const { return 0; }
  virtual std::string name(int node) const { return std::to_string(node); }
};

class Sandbox {
 public:
  Sandbox(const Scenario& s, std::string run_dir, History& hist, Supervisor& sup);
  ~Sandbox();

  // The hub and one namespace per node (topology.network: namespaces); with topology.hosts, a
  // chain of the run's own on each host instead (the hosts are the nodes).
  void setup_network();
  bool has_network() const { return !node_holders_.empty() || !host_devs_.empty(); }
  static std::string node_ip(int node);
  // `node`'s address on interface eth`nic` (topology.nics; eth0's is node_ip).
  static std::string nic_ip(int node, int nic);
  // `node`'s address on the data-plane network (a namespace's, or the host's NAME=ADDRESS).
  std::string ip(int node) const;
  // The iptables chain network faults fill on every node, and a node's data-plane device.
  const std::string& chain() const { return chain_; }
  std::string device(int node) const;
  // Interface eth`nic` of a namespaced node (nic 0: device(node)).
  std::string device(int node, int nic) const;
  // argv run inside `node`'s network namespace (-1: the hub's), or on host `node` through the
  // scenario's rsh agent.
  std::vector<std::string> in_net(int node, std::vector<std::string> argv) const;
  // Runs argv on `node` (run_tool's output or Error): through the host's agent when one is up,
  // else as in_net says. `via` names which ("agent", "rsh" or "netns").
  std::string run_on(int node, const std::vector<std::string>& argv) const;
  std::string via(int node) const;
  void set_agents(HostAgents* a) { agents_ = a; }
  HostAgents* agents() const { return agents_; }
  // The run's supervisor: this machine's ranks are its children (Node::signal_rank).
  Supervisor& supervisor() const { return sup_; }
  // This machine as host 0 of a run without agents: the node whose handlers run in this process
  // (made on first use; what it still holds is undone when the sandbox goes).
  Node& local_node();
  // With hosts: removes the run's chain from every host (idempotent; records fault_healed).
  void remove_host_chains();
  // The shared mount namespace, created on first use; argv run inside it.
  std::vector<std::string> in_mount(std::vector<std::string> argv);
  bool has_mounts() const { return mount_holder_ != 0; }

  // Where ranks reach the store: 127.0.0.1, or node 0's address inside the namespaces.
  std::string master_addr() const;
  // The hub namespace (/proc/PID/ns/net, "" without one) and its bridge's address, which every
  // node's namespace reaches and nothing outside the run's namespaces does (the harness's PMIx
  // server is relayed there: launch/netns_relay.hpp).
  std::string hub_netns() const;
  static std::string hub_addr();
  // A rank's process enters its node's network namespace and the mount namespace, and the cgroups
  // this machine's node made for it (Node::place_at_spawn).
  void adjust_rank(int rank, ProcessSpec& spec, std::map<std::string, std::string>& env) const;
  // A helper the ranks must reach over the data-plane network (mpirun, ompi-server).
  void adjust_helper(ProcessSpec& spec, std::map<std::string, std::string>& env) const;
  // A helper of one node (a launcher per node): the node's network namespace and the mount
  // namespace, as that node's ranks have them.
  void adjust_node(int node, ProcessSpec& spec, std::map<std::string, std::string>& env) const;
  // After teardown: records whether the namespaces died with their holders.
  void check_gone();

 private:
  pid_t spawn_holder(const std::string& name, const std::vector<std::string>& unshare_args);
  void setup_hosts();  // sandbox_hosts.cpp
  void add_nics();     // topology.nics
  HostAgents* agents_ = nullptr;
  std::unique_ptr<Node> local_;

  std::string chain_ = "FAULTLINE";
  std::vector<std::string> host_devs_;  // with hosts: each host's device, once set up

  const Scenario& s_;
  std::string dir_;
  History& hist_;
  Supervisor& sup_;
  pid_t hub_ = 0, mount_holder_ = 0;
  std::vector<pid_t> node_holders_;
};

}  // namespace fl::harness::faults
