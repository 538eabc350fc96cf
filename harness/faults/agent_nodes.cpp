#include "harness/faults/agent_nodes.hpp"

#include <google/protobuf/any.pb.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/placement.hpp"

namespace fl::harness::faults {

bool slurm_places_ranks(const Scenario& s) {
  return s.topo.launcher == "srun" && s.topo.hosts.empty();
}

std::vector<int> fault_nodes(const Host& h, int rank) {
  std::vector<int> nodes;
  if (!h.s.topo.hosts.empty()) {
    if (rank >= 0) return {host_of_rank(h.s.topo, rank)};
    for (size_t k = 0; k < h.s.topo.hosts.size(); ++k) nodes.push_back(static_cast<int>(k));
  } else if (slurm_places_ranks(h.s)) {
    // The harness's own machine is none of the nodes srun starts the ranks on: acting there
    // would change nothing the ranks see.
    if (!h.box.agents()) {
      raise<Error>(
          "a fault on {} needs the run's agents: with topology.launcher: srun and no "
          "topology.hosts Slurm places the ranks, and only the agent on each node acts there, but "
          "this run has none (faultline run starts them, one per node of the allocation)",
          rank < 0 ? std::string("every rank") : fmt::format("rank {}", rank));
    }
    for (int k = 0; k < h.box.agents()->count(); ++k) nodes.push_back(k);
  }
  return nodes;
}

std::vector<int> nodes_of(const Host& h, int rank) {
  auto nodes = fault_nodes(h, rank);
  if (nodes.empty()) nodes.push_back(0);
  return nodes;
}

std::string node_name(const Host& h, int node) {
  if (!h.s.topo.hosts.empty()) return h.s.topo.hosts.at(static_cast<size_t>(node));
  return h.box.agents() ? h.box.agents()->name(node) : std::to_string(node);
}

HostAgents& agent_for(Host& h, int node, std::string_view fault, std::string_view then) {
  auto* a = h.box.agents();
  if (a && a->up(node)) return *a;
  const std::string after = then.empty() ? std::string() : fmt::format("; {}", then);
  if (!a) {
    raise<Error>(
        "{} needs the agent of {}, and this run has none (agents run with topology.hosts or "
        "launcher srun){}",
        fault, node_name(h, node), after);
  }
  raise<Error>(
      "{} needs the agent of {}, and it is not up (lost, or it never attached: the run's "
      "agent_lost events and helpers.log say why){}",
      fault, node_name(h, node), after);
}

int locate_rank(Host& h, int rank, pid_t pid, std::string& why) {
  auto* a = h.box.agents();
  if (!a) {
    why = "no agents";
    return -1;
  }
  std::vector<std::string> nots;
  for (int k = 0; k < a->count(); ++k) {
    if (!a->up(k)) {
      nots.push_back(a->name(k) + ": its agent is not up");
      continue;
    }
    std::string w;
    if (a->signal(k, rank, pid, 0, w)) return k;
    nots.push_back(a->name(k) + ": " + w);
  }
  why = nots.empty() ? std::string("no agent is up") : fmt::format("{}", fmt::join(nots, "; "));
  return -1;
}

std::string needs_rank_node(const std::string& kind, const std::string& why) {
  return fmt::format(
      "{} cannot go through the agents with topology.launcher: srun and no topology.hosts: Slurm "
      "picks the rank's node only at launch, and {} (allowed: add topology.hosts, whose hosts "
      "land on the allocation's nodes, or use launcher local or mpirun)",
      kind, why);
}

bool in_process(const Host& h, int node) {
  return node == 0 && !h.box.agents() && h.s.topo.hosts.empty() && !slurm_places_ranks(h.s);
}

nlohmann::json where(const Host& h, int node, const nlohmann::json& report) {
  nlohmann::json d = {{"via", "local"}};
  if (!in_process(h, node)) {
    d = {{"via", "agent"}, {"host", node < 0 ? std::string() : node_name(h, node)}};
  }
  if (!report.is_null()) d["agent"] = report;
  return d;
}

std::string on_host(const Host& h, int node) {
  return in_process(h, node) ? std::string() : " on " + node_name(h, node);
}

bool reachable(const Host& h, int node) {
  return in_process(h, node) || (h.box.agents() && h.box.agents()->up(node));
}

nlohmann::json on_node(Host& h, int node, const google::protobuf::Message& request,
                       std::string_view fault, std::string_view then) {
  google::protobuf::Any any;
  any.PackFrom(request);
  if (in_process(h, node)) return h.box.local_node().apply(any);
  return agent_for(h, node, fault, then).apply(node, any);
}

std::vector<nlohmann::json> on_nodes(Host& h, const std::vector<int>& targets,
                                     const google::protobuf::Message& request,
                                     std::string_view fault, std::string_view then) {
  std::vector<nlohmann::json> reports;
  for (const int node : targets) reports.push_back(on_node(h, node, request, fault, then));
  return reports;
}

void note_swept(Host& h, int node, const nlohmann::json& report) {
  const int removed = report.value("stale_cgroups_removed", 0);
  if (removed <= 0) return;
  nlohmann::json d = {{"stale_cgroups_removed", removed}};
  d.update(where(h, node));
  h.hist.harness("cleanup", d);
}

void release_group(Host& h, int node, int rank, const std::string& fault,
                   const google::protobuf::Message& release, const std::string& cgroup,
                   const ReleaseReport& more) {
  nlohmann::json d;
  try {
    d = {{"fault", fault}, {"cgroup", cgroup}};
    d.update(where(h, node));
    const auto r =
        on_node(h, node, release, fault, "the next agent on that host removes its group");
    d["removed"] = r.value("removed", false);
    d["moved_back"] = r.value("moved_back", 0);
    if (more) more(r, d);
    h.hist.harness("fault_healed", d, rank);
  } catch (const std::exception& e) {
    try {
      d["fault"] = fault;
      d["error"] = e.what();
      h.hist.harness("heal_error", d, rank);
    } catch (...) {
    }
  }
}

}  // namespace fl::harness::faults
