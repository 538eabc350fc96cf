// The sandbox's network on real hosts (topology.hosts): no namespaces of the run's own, but one
// iptables chain per run on every host, reached through the rsh agent; network faults fill it,
// healing flushes it, and the end of the run removes it (a host outlives the run).
#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>

#include <google/protobuf/any.pb.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/hosts.hpp"

namespace fl::harness::faults {

nlohmann::json HostAgents::apply(int node, const google::protobuf::Any& request) {
  raise<Error>("host {}: it has no agent to apply {}", node, request_name(request.type_url()));
}

void Sandbox::setup_hosts() {
  const auto t0 = std::chrono::steady_clock::now();
  // One chain per run (28 characters at most): two runs on the same hosts never share rules.
  chain_ = fmt::format("FL-{:012x}", std::hash<std::string>{}(dir_)&0xffffffffffffULL);
  for (size_t k = 0; k < s_.topo.hosts.size(); ++k) {
    const int node = static_cast<int>(k);
    // The device that carries the host's address is where a rate limit goes.
    const std::string out = run_on(node, {"ip", "-o", "addr", "show", "to", ip(node)});
    std::istringstream words(out);
    std::string index, dev;
    words >> index >> dev;
    if (dev.empty()) {
      raise<Error>(
          "host {} has no interface with address {} (topology.hosts: give the address "
          "the hosts reach each other on)",
          s_.topo.hosts[k], ip(node));
    }
    if (auto at = dev.find('@'); at != std::string::npos) dev.resize(at);  // eth0@if12
    run_on(node, {"iptables", "-N", chain_});
    host_devs_.push_back(dev);  // from here on the chain is the run's to remove
    if (agents_ && agents_->up(node)) {
      // Should the agent lose the harness (killed, its host cut off), it removes the chain.
      for (const char* hook : {"INPUT", "OUTPUT"})
        agents_->on_loss(node, {"iptables", "-D", hook, "-j", chain_});
      agents_->on_loss(node, {"iptables", "-F", chain_});
      agents_->on_loss(node, {"iptables", "-X", chain_});
    }
    run_on(node, {"iptables", "-I", "INPUT", "-j", chain_});
    run_on(node, {"iptables", "-I", "OUTPUT", "-j", chain_});
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> vias;
  for (size_t k = 0; k < s_.topo.hosts.size(); ++k) vias.push_back(via(static_cast<int>(k)));
  hist_.harness("network_setup", {{"nodes", s_.topo.nodes},
                                  {"via", vias},
                                  {"hosts", s_.topo.hosts},
                                  {"addresses", s_.topo.host_addrs},
                                  {"devices", host_devs_},
                                  {"chain", chain_},
                                  {"setup_ms", ms}});
}

std::string Sandbox::run_on(int node, const std::vector<std::string>& argv) const {
  // Only hosts' tools go through agents (srun's agents without hosts sit on Slurm's nodes).
  if (agents_ && !s_.topo.hosts.empty() && node >= 0 && agents_->up(node))
    return agents_->run(node, argv);
  return run_tool(in_net(node, argv));
}

std::string Sandbox::via(int node) const {
  if (s_.topo.hosts.empty()) return "netns";
  return agents_ && agents_->up(node) ? "agent" : "rsh";
}

void Sandbox::remove_host_chains() {
  if (host_devs_.empty()) return;
  std::vector<std::string> vias;
  for (size_t k = 0; k < host_devs_.size(); ++k) vias.push_back(via(static_cast<int>(k)));
  int removed = 0;
  std::vector<std::string> errors, gone;
  for (size_t k = 0; k < host_devs_.size(); ++k) {
    const int node = static_cast<int>(k);
    // An agent that lost the harness removes the chain itself (its on_loss commands): a chain
    // already gone is removed, not an error.
    try {
      if (run_on(node, {"iptables", "-S"}).find("-N " + chain_ + "\n") == std::string::npos) {
        gone.push_back(s_.topo.hosts[k]);
        ++removed;
        continue;
      }
    } catch (const std::exception&) {
      // cannot tell: the steps below say what is wrong
    }
    // Each step on its own: a jump already gone must not keep the chain.
    for (const auto& argv :
         std::vector<std::vector<std::string>>{{"iptables", "-D", "INPUT", "-j", chain_},
                                               {"iptables", "-D", "OUTPUT", "-j", chain_},
                                               {"iptables", "-F", chain_},
                                               {"iptables", "-X", chain_}}) {
      try {
        run_on(node, argv);
        if (argv[1] == "-X") ++removed;
      } catch (const std::exception& e) {
        errors.push_back(fmt::format("{}: {}", s_.topo.hosts[k], e.what()));
      }
    }
  }
  try {
    hist_.harness("fault_healed", {{"fault", "host_chains"},
                                   {"chain", chain_},
                                   {"removed", removed},
                                   {"hosts", host_devs_.size()},
                                   {"via", vias},
                                   {"already_gone", gone},
                                   {"errors", errors}});
  } catch (...) {
  }
  host_devs_.clear();
}

}  // namespace fl::harness::faults
