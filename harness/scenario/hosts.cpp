// topology.hosts / topology.hostfile and topology.rsh_agent: the hosts mpirun spreads the ranks
// over (docs/cluster.md).
// Checked here for what the file alone can tell; whether a host answers is checked before launch
// (harness/process/hosts.cpp).
#include <filesystem>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "harness/model/placement.hpp"
#include "harness/scenario/hostfile.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {
// topology.rsh_agent: one program (a path or a command name), never a shell string.
void check_rsh_agent(const std::string& file, const YAML::Node& raw, const std::string& agent) {
  ErrorCollector::check([&] {
    static const std::regex agent_re("(/[A-Za-z0-9._+/-]+|[A-Za-z0-9._+-]+)");
    if (!agent.empty() && !std::regex_match(agent, agent_re)) {
      fail_at(file, raw["rsh_agent"], "topology.rsh_agent",
              fmt::format("'{}' is not a program (allowed: an absolute path or a command name, "
                          "letters, digits and ._+-/ only; options go in the program)",
                          agent));
    }
  });
}
}  // namespace

namespace {

// topology.hostfile, relative to the scenario file: its hosts into `s`; the file's absolute path
// ("" when it could not be read, which is reported).
std::string read_hostfile_hosts(const std::string& file, const YAML::Node& raw,
                                const std::string& hostfile, std::vector<HostfileEntry>& entries,
                                Scenario& s) {
  // The resolved scenario (RUN_DIR/scenario.yaml, the preparation and reference runs) carries the
  // absolute path.
  namespace fs = std::filesystem;
  const fs::path hp(hostfile);
  const std::string abs = (hp.is_absolute() ? hp : fs::absolute(fs::path(file).parent_path() / hp))
                              .lexically_normal()
                              .string();
  bool read = false;
  ErrorCollector::check([&] {
    try {
      entries = parse_hostfile(abs);
      read = true;
    } catch (const ScenarioError& e) {
      fail_at(file, raw["hostfile"], "topology.hostfile", e.what());
    }
  });
  if (!read) return "";
  for (auto& e : entries) {
    s.topo.hosts.push_back(e.name);
    s.topo.host_addrs.push_back(e.address);
  }
  return abs;
}

// topology.hosts: NAME or NAME=ADDRESS, each host once.
void read_listed_hosts(const std::string& file, const YAML::Node& raw, const YAML::Node& hosts,
                       Scenario& s) {
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
                fmt::format("'{}' is not a host name (allowed: NAME or NAME=ADDRESS, the name "
                            "of letters, digits, '.', '_' and '-', not starting with a "
                            "punctuation)",
                            name));
      }
      if (eq != std::string::npos && !host_address_ok(addr)) {
        fail_at(file, where, at,
                fmt::format("'{}' is not an IP address (allowed: NAME=ADDRESS with an IPv4 or "
                            "IPv6 address, or NAME alone to have it resolved)",
                            addr));
      }
      if (!seen.insert(name).second) {
        fail_at(file, where, at, fmt::format("host {} is listed twice (each host once)", name));
      }
    });
    s.topo.hosts.push_back(name);
    s.topo.host_addrs.push_back(addr);
  }
}

// What the hosts ask of the rest of the topology: a launcher that reaches them, nodes left out
// (or matching), ranks that spread evenly.
void check_host_spread(const std::string& file, const YAML::Node& raw, const YAML::Node& list_at,
                       const std::string& label, const Scenario& s) {
  const int n = static_cast<int>(s.topo.hosts.size());
  ErrorCollector::check([&] {
    if (s.topo.launcher != "mpirun" && s.topo.launcher != "srun") {
      fail_at(file, raw["launcher"] ? raw["launcher"] : list_at, "topology.launcher",
              fmt::format("{} needs launcher mpirun (got {}; srun too, inside a Slurm "
                          "allocation; the local launcher starts every rank on this machine)",
                          label, s.topo.launcher));
    }
    if (raw["nodes"] && s.topo.nodes != n && s.topo.nodes != 1) {
      fail_at(file, raw["nodes"], "topology.nodes",
              fmt::format("topology.nodes is {} but {} lists {} hosts (leave nodes "
                          "out: each host is a node)",
                          s.topo.nodes, label, n));
    }
    if (s.topo.ranks % n != 0) {
      fail_at(file, raw["ranks"] ? raw["ranks"] : raw, "topology.ranks",
              fmt::format("{} ranks do not spread evenly over {} hosts (allowed: a multiple of {})",
                          s.topo.ranks, n, n));
    }
  });
}

// A hostfile's slots bound what a host takes: the ranks spread evenly, ranks / hosts each.
void check_hostfile_slots(const std::string& file, const YAML::Node& list_at,
                          const std::string& hostfile, const std::vector<HostfileEntry>& entries,
                          const Scenario& s) {
  const int n = static_cast<int>(s.topo.hosts.size());
  if (s.topo.ranks % n != 0) return;
  const int per = ranks_per_node(s.topo.ranks, n);  // what each host gets (placement.hpp)
  for (const auto& e : entries) {
    const int cap = e.max_slots != 0 ? e.max_slots : e.slots;
    ErrorCollector::check([&] {
      if (cap != 0 && cap < per) {
        fail_at(file, list_at, "topology.hostfile",
                fmt::format("{}:{}: host {} has {}={} but gets {} of the {} ranks (they spread "
                            "evenly over the {} hosts; allowed: {} or more, or leave it out)",
                            hostfile, e.line, e.name, e.max_slots != 0 ? "max_slots" : "slots", cap,
                            per, s.topo.ranks, n, per));
      }
    });
  }
}

// Whether exactly one of hosts and hostfile is given (an rsh agent needs one); reported if not.
bool one_host_list(const std::string& file, const YAML::Node& raw, bool listed,
                   const std::string& hostfile, const Scenario& s) {
  if (listed && !hostfile.empty()) {
    ErrorCollector::check([&] {
      fail_at(file, raw["hostfile"], "topology.hostfile",
              "topology.hosts and topology.hostfile are both set (allowed: exactly one of them)");
    });
    return false;
  }
  if (!listed && hostfile.empty()) {
    ErrorCollector::check([&] {
      if (!s.topo.rsh_agent.empty()) {
        fail_at(file, raw["rsh_agent"], "topology.rsh_agent",
                "an rsh agent needs topology.hosts or topology.hostfile (the hosts it reaches)");
      }
    });
    return false;
  }
  return true;
}

}  // namespace

void parse_hosts(const std::string& file, const YAML::Node& doc, const YAML::Node& t, Scenario& s) {
  const YAML::Node raw = doc["topology"] ? doc["topology"] : YAML::Node();
  s.topo.rsh_agent = t["rsh_agent"] ? t["rsh_agent"].as<std::string>() : "";
  check_rsh_agent(file, raw, s.topo.rsh_agent);
  const YAML::Node hosts = t["hosts"];
  const std::string hostfile = t["hostfile"] ? t["hostfile"].as<std::string>() : "";
  if (!one_host_list(file, raw, hosts && hosts.size() > 0, hostfile, s)) return;
  std::string label = "topology.hosts", resolved_hostfile;
  std::vector<HostfileEntry> from_file;
  if (!hostfile.empty()) {
    label = "topology.hostfile";
    resolved_hostfile = read_hostfile_hosts(file, raw, hostfile, from_file, s);
    if (resolved_hostfile.empty()) return;
  } else {
    read_listed_hosts(file, raw, hosts, s);
  }
  const YAML::Node list_at = resolved_hostfile.empty() ? raw["hosts"] : raw["hostfile"];
  check_host_spread(file, raw, list_at, label, s);
  check_hostfile_slots(file, list_at, resolved_hostfile, from_file, s);
  s.topo.nodes = static_cast<int>(s.topo.hosts.size());
  if (!resolved_hostfile.empty()) {
    // The resolved scenario (RUN_DIR/scenario.yaml) and the preparation and reference runs,
    // loaded from the run directory, name the file absolutely.
    YAML::Node topo = t;
    topo["hostfile"] = resolved_hostfile;
    YAML::Node d = doc;
    if (d["topology"] && d["topology"]["hostfile"]) d["topology"]["hostfile"] = resolved_hostfile;
  }
}

}  // namespace fl::harness::loader
