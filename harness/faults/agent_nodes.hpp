// Which nodes do a fault's work, and the one call that has them do it (on_nodes). Which agents do
// a fault's work on the ranks' machines: With topology.hosts, the agent of the
// rank's host (every host's for a fault on every rank). With launcher srun and no hosts, Slurm
// picks each rank's node only at launch, so a fault set up before launch goes to every node's
// agent and only the one on the rank's node finds the rank (the same check signal faults use:
// the run's secret and RANK in the process's environment). Otherwise none: the harness acts on
// its own machine, host 0, whose node runs in the harness's process (Sandbox::local_node).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace google::protobuf {
class Message;
}

namespace fl::harness {
struct Scenario;
}

namespace fl::harness::faults {

struct Host;
class HostAgents;

// launcher srun without topology.hosts: the ranks' nodes are Slurm's choice, made at launch.
bool slurm_places_ranks(const Scenario& s);

// The agents a fault on `rank` (-1: every rank) goes through, as above; empty: none (local).
// Error when Slurm places the ranks and the run has no agents (no node could be reached).
std::vector<int> fault_nodes(const Host& h, int rank);
// The nodes a fault on `rank` acts on: fault_nodes, or this machine (node 0, in process) when
// that is empty.
std::vector<int> nodes_of(const Host& h, int rank);

// Agent `node`, up, to do `fault`'s work; otherwise Error naming the fault, the agent's host or
// node, where to see why, and `then` (what follows, in a heal; empty: nothing said).
HostAgents& agent_for(Host& h, int node, std::string_view fault, std::string_view then = {});

// Agent `node`'s name in events: its host, or (launcher srun without hosts) its node.
std::string node_name(const Host& h, int node);

// The agent whose node runs `pid` as `rank` of this run (asked in turn, signal 0: nothing is
// sent), or -1 with `why` naming each agent's answer.
int locate_rank(Host& h, int rank, pid_t pid, std::string& why);

// The load-time refusal for a fault that needs the rank's node before launch (shm, hide, a
// disk_full on one rank): the text loader::fail_at shows, naming the fault and the launcher.
std::string needs_rank_node(const std::string& kind, const std::string& why);

// Has node `node` apply `request` (a fault kind's typed message, on_nodes.hpp): host 0 of a run
// without agents in this process, any other through its agent (up, as agent_for says; `fault`
// and `then` name the fault and what follows in its errors). The node's report of what it did,
// or Error with its reason.
nlohmann::json on_node(Host& h, int node, const google::protobuf::Message& request,
                       std::string_view fault, std::string_view then = {});
// The same on each of `targets`, in order: their reports. The first failure throws (the nodes
// before it did the work).
std::vector<nlohmann::json> on_nodes(Host& h, const std::vector<int>& targets,
                                     const google::protobuf::Message& request,
                                     std::string_view fault, std::string_view then = {});
// Where a record says the work was done: {"via": "local"} on this machine (in process), else
// {"via": "agent", "host": its name ("" for node -1: no one node)}; and, when given, "agent": the
// node's report (this machine's in-process node is host 0's agent). on_host: the same for a
// summary line, "" or " on HOST".
nlohmann::json where(const Host& h, int node, const nlohmann::json& report = nullptr);
std::string on_host(const Host& h, int node);
// Whether on_node reaches `node` now: this machine, or a host whose agent is up.
bool reachable(const Host& h, int node);
// Whether `node` is this machine, whose handlers run in the harness's process: node 0 of a run
// without agents (no topology.hosts, not Slurm's placement).
bool in_process(const Host& h, int node);

// A cgroup fault's set-up report from `node` (cpu_quota, memory_limit): the stale groups of gone
// harnesses and agents it removed before it made the rank's, recorded as `cleanup`
// {stale_cgroups_removed, via, host} when there were any.
void note_swept(Host& h, int node, const nlohmann::json& report);

// Has node `node` apply `release` (MemoryRelease, CpuRelease: the rank's group there): it moves
// what is left of the rank back and removes the group. Records fault_healed (fault, cgroup,
// via, host, removed, moved_back, plus what `more` adds from the node's report; `more` runs
// before the record), or heal_error when the node's agent is gone (the next agent on that host
// sweeps the group) or refused.
using ReleaseReport = std::function<void(const nlohmann::json& report, nlohmann::json& healed)>;
void release_group(Host& h, int node, int rank, const std::string& fault,
                   const google::protobuf::Message& release, const std::string& cgroup,
                   const ReleaseReport& more = {});

}  // namespace fl::harness::faults
