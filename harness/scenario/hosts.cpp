// topology.hosts and topology.rsh_agent: the hosts mpirun spreads the ranks over (docs/cluster.md).
// Checked here for what the file alone can tell; whether a host answers is checked before launch
// (harness/run/hosts.cpp).
#include <arpa/inet.h>

#include <regex>
#include <set>

#include <fmt/format.h>

#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {

// A host name as a resolver or `ip netns` takes it; it also travels through an rsh agent's
// command line, so nothing a shell would read.
bool host_name_ok(const std::string& n) {
  static const std::regex re("[A-Za-z0-9][A-Za-z0-9._-]{0,252}");
  return std::regex_match(n, re);
}

bool address_ok(const std::string& a) {
  unsigned char buf[16];
  return inet_pton(AF_INET, a.c_str(), buf) == 1 || inet_pton(AF_INET6, a.c_str(), buf) == 1;
}

}  // namespace

void parse_hosts(const std::string& file, const YAML::Node& doc, const YAML::Node& t, Scenario& s) {
  const YAML::Node raw = doc["topology"] ? doc["topology"] : YAML::Node();
  s.rsh_agent = t["rsh_agent"] ? t["rsh_agent"].as<std::string>() : "";
  ErrorCollector::check([&] {
    static const std::regex agent_re("(/[A-Za-z0-9._+/-]+|[A-Za-z0-9._+-]+)");
    if (!s.rsh_agent.empty() && !std::regex_match(s.rsh_agent, agent_re)) {
      fail_at(file, raw["rsh_agent"], "topology.rsh_agent",
              fmt::format("'{}' is not a program (allowed: an absolute path or a command name, "
                          "letters, digits and ._+-/ only; options go in the program)",
                          s.rsh_agent));
    }
  });
  const YAML::Node hosts = t["hosts"];
  if (!hosts || hosts.size() == 0) {
    ErrorCollector::check([&] {
      if (!s.rsh_agent.empty()) {
        fail_at(file, raw["rsh_agent"], "topology.rsh_agent",
                "an rsh agent needs topology.hosts (the hosts it reaches)");
      }
    });
    return;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string at = fmt::format("topology.hosts[{}]", i);
    const std::string item = hosts[i].as<std::string>();
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const std::string addr = eq == std::string::npos ? "" : item.substr(eq + 1);
    const YAML::Node where = raw["hosts"] ? raw["hosts"][i] : raw;
    ErrorCollector::check([&] {
      if (!host_name_ok(name)) {
        fail_at(file, where, at,
                fmt::format("'{}' is not a host name (allowed: NAME or NAME=ADDRESS, the name of "
                            "letters, digits, '.', '_' and '-', not starting with a punctuation)",
                            name));
      }
      if (eq != std::string::npos && !address_ok(addr)) {
        fail_at(file, where, at,
                fmt::format("'{}' is not an IP address (allowed: NAME=ADDRESS with an IPv4 or "
                            "IPv6 address, or NAME alone to have it resolved)",
                            addr));
      }
      if (!seen.insert(name).second) {
        fail_at(file, where, at, fmt::format("host {} is listed twice (each host once)", name));
      }
    });
    s.hosts.push_back(name);
    s.host_addrs.push_back(addr);
  }
  const int n = static_cast<int>(s.hosts.size());
  ErrorCollector::check([&] {
    if (s.launcher != "mpirun") {
      fail_at(file, raw["launcher"] ? raw["launcher"] : raw["hosts"], "topology.launcher",
              fmt::format("topology.hosts needs launcher mpirun (got {}; the local launcher "
                          "starts every rank on this machine)",
                          s.launcher));
    }
    if (raw["nodes"] && s.nodes != n && s.nodes != 1) {
      fail_at(file, raw["nodes"], "topology.nodes",
              fmt::format("topology.nodes is {} but topology.hosts lists {} hosts (leave nodes "
                          "out: each host is a node)",
                          s.nodes, n));
    }
    if (s.ranks % n != 0) {
      fail_at(file, raw["ranks"] ? raw["ranks"] : raw, "topology.ranks",
              fmt::format("{} ranks do not spread evenly over {} hosts (allowed: a multiple of {})",
                          s.ranks, n, n));
    }
  });
  s.nodes = n;
}

}  // namespace fl::harness::loader
