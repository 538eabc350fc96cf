// What a fault kind does on a host, the way Jepsen's `on-nodes` runs a function on each node: the
// kind sends one typed request (its own message in faultline.proto) to the nodes it targets, and
// the handler it registered for that message runs there. Host 0 of a run without agents is this
// machine: its handler runs in the harness's own process (the run's Sandbox holds that node).
// Every other host's request goes through its agent (harness/agent), which applies it with the
// same handler, looked up in the same registry (the fault kinds', registry.cpp). So a kind that
// also works on other hosts is its file plus its message: no op name, no dispatch to extend.
//
// This header stays light (no protobuf): the kinds' files include node_handler.hpp to define a
// handler, agent_nodes.hpp to send a request.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace google::protobuf {
class Any;
}

namespace fl::harness::faults {

class Sandbox;

// What a kind keeps on a node between its requests (the cgroups, mounts, backups it made), one
// object per kind and node; undone when the node ends (the agent stops, loses the harness, or the
// run's in-process node goes).
class NodeState {
 public:
  virtual ~NodeState() = default;
  // Undoes whatever is still in place; one line per thing undone (or that could not be); never
  // throws.
  virtual std::vector<std::string> cleanup() = 0;
};

// One node as the handlers see it: the run directory (shared between the hosts), this host's
// name, the run's secret (how a rank's process is known: its environment carries it), the state
// each kind keeps here, and on this machine the run's Sandbox.
class Node {
 public:
  Node(std::string run_dir, std::string host, std::string secret, Sandbox* box = nullptr);
  ~Node();  // cleanup()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& run_dir() const { return dir_; }
  const std::string& host() const { return host_; }
  const std::string& secret() const { return secret_; }
  // The run's Sandbox when this node is the harness's own machine (Sandbox::local_node), else
  // nullptr (an agent's host). A handler acts through it where the run's ranks live: the run's
  // mount namespace (Sandbox::in_mount), not the harness's, so a tmpfs lands where they see it.
  Sandbox* sandbox() const { return box_; }

  // Sends `sig` (0: only checks) to `pid` once it is `rank` of this run here: on this machine one
  // of the harness's children or their descendants (the run's Supervisor signals a child's process
  // group), on an agent's host a process whose environment carries the run's secret and RANK (or
  // that works in the rank's directory). False with `why` naming the process and what it is.
  bool signal_rank(int rank, pid_t pid, int sig, std::string& why) const;
  // Runs a network tool (iptables, tc) in this node's network, bounded in time: on this machine in
  // simulated node `netns`'s namespace (Sandbox::in_net), on an agent's host in the host's own
  // (`netns` -1). Its output, or Error with the tool's.
  std::string run_net(int netns, const std::vector<std::string>& argv) const;

  // Has `rank`'s processes, as they start on this node, join the cgroup whose cgroup.procs is
  // `procs` (a cgroup fault's group, rank_cgroup.hpp). On this machine the harness starts them:
  // each writes itself in before exec (Sandbox::adjust_rank takes spawn_cgroups), and this says
  // true. On an agent's host mpirun's daemon or srun starts them: false, and the group's watcher
  // moves them in as they appear. unplace: no longer (the group goes).
  bool place_at_spawn(int rank, const std::string& procs);
  void unplace(int rank, const std::string& procs);
  // The cgroup.procs files a process of `rank` started here writes itself into.
  std::vector<std::string> spawn_cgroups(int rank) const;

  // Applies one request with the handler registered for its type: the JSON report of what was
  // done; Error naming what and why when the request is refused or fails, and for a type no kind
  // handles (naming it and the types there are).
  nlohmann::json apply(const google::protobuf::Any& request);

  // Kind state S (a NodeState), made on first use.
  template <class S>
  S& state() {
    for (auto& [type, s] : states_) {
      if (type == std::type_index(typeid(S))) return static_cast<S&>(*s);
    }
    states_.emplace_back(std::type_index(typeid(S)), std::make_unique<S>(*this));
    return static_cast<S&>(*states_.back().second);
  }
  // Undoes everything still in place, the newest kind's state first (see NodeState::cleanup).
  std::vector<std::string> cleanup();

  // What agents (or harnesses) that died left on this host, as each handler knows it (cgroups
  // named after a pid that is gone, a tmpfs whose agent is gone). One line per thing removed.
  static std::vector<std::string> sweep_stale();

 private:
  std::string dir_, host_, secret_;
  Sandbox* box_;
  std::multimap<int, std::string> spawn_cgroups_;  // rank -> cgroup.procs (this machine only)
  std::vector<std::pair<std::type_index, std::unique_ptr<NodeState>>> states_;
};

// A kind's handler of one request type (node_handler.hpp makes one from a function).
class NodeHandler {
 public:
  virtual ~NodeHandler() = default;
  // The request message's full name ("faultline.v1.DiskFull").
  virtual std::string type() const = 0;
  // Unpacks the request and applies it on `n`: as Node::apply says.
  virtual nlohmann::json apply(Node& n, const google::protobuf::Any& request) const = 0;
  // What agents that died left on this host for this handler's kind (Node::sweep_stale).
  virtual std::vector<std::string> sweep_stale() const { return {}; }
};

// The handler of request type `type` among every kind's (nullptr: none), and every type handled.
const NodeHandler* node_handler(const std::string& type);
std::vector<std::string> node_request_types();

// A request's name in messages: its message name in snake case ("faultline.v1.DiskFull" and
// "type.googleapis.com/faultline.v1.DiskFull": "disk_full").
std::string request_name(const std::string& type);

// RUN_DIR/REL as an absolute path, or Error when REL is empty, absolute, has a `..` component, or
// resolves (through links) outside the run directory; `what` names the request.
std::string run_path(const std::string& run_dir, const std::string& rel, const std::string& what);

}  // namespace fl::harness::faults
