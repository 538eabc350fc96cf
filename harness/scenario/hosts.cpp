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

void parse_hosts(const std::string& file, const YAML::Node& doc, const YAML::Node& t, Scenario& s) {
  const YAML::Node raw = doc["topology"] ? doc["topology"] : YAML::Node();
  s.topo.rsh_agent = t["rsh_agent"] ? t["rsh_agent"].as<std::string>() : "";
  check_rsh_agent(file, raw, s.topo.rsh_agent);
  const YAML::Node hosts = t["hosts"];
  const std::string hostfile = t["hostfile"] ? t["hostfile"].as<std::string>() : "";
  const bool listed = hosts && hosts.size() > 0;
  if (listed && !hostfile.empty()) {
    ErrorCollector::check([&] {
      fail_at(file, raw["hostfile"], "topology.hostfile",
              "topology.hosts and topology.hostfile are both set (allowed: exactly one of them)");
    });
    return;
  }
  if (!listed && hostfile.empty()) {
    ErrorCollector::check([&] {
      if (!s.topo.rsh_agent.empty()) {
        fail_at(file, raw["rsh_agent"], "topology.rsh_agent",
                "an rsh agent needs topology.hosts or topology.hostfile (the hosts it reaches)");
      }
    });
    return;
  }
  std::string label = "topology.hosts", resolved_hostfile;
  std::vector<HostfileEntry> from_file;
  if (!hostfile.empty()) {
    // Relative to the scenario file; the resolved scenario (RUN_DIR/scenario.yaml, the
    // preparation and reference runs) carries the absolute path.
    namespace fs = std::filesystem;
    const fs::path hp(hostfile);
    const std::string abs =
        (hp.is_absolute() ? hp : fs::absolute(fs::path(file).parent_path() / hp))
            .lexically_normal()
            .string();
    label = "topology.hostfile";
    bool read = false;
    ErrorCollector::check([&] {
      try {
        from_file = parse_hostfile(abs);
        read = true;
      } catch (const ScenarioError& e) {
        fail_at(file, raw["hostfile"], "topology.hostfile", e.what());
      }
    });
    if (!read) return;
    resolved_hostfile = abs;
    for (auto& e : from_file) {
      s.topo.hosts.push_back(e.name);
      s.topo.host_addrs.push_back(e.address);
    }
  } else {
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
  const int n = static_cast<int>(s.topo.hosts.size());
  const YAML::Node list_at = resolved_hostfile.empty() ? raw["hosts"] : raw["hostfile"];
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
  // A hostfile's slots bound what a host takes: the ranks spread evenly, ranks / hosts each.
  for (const auto& e : from_file) {
    if (s.topo.ranks % n != 0) break;
    const int per = ranks_per_node(s.topo.ranks, n);  // what each host gets (placement.hpp)
    const int cap = e.max_slots != 0 ? e.max_slots : e.slots;
    ErrorCollector::check([&] {
      if (cap != 0 && cap < per) {
        fail_at(
            file, list_at, "topology.hostfile",
            fmt::format("{}:{}: host {} has {}={} but gets {} of the {} ranks (they spread "
                        "evenly over the {} hosts; allowed: {} or more, or leave it out)",
                        resolved_hostfile, e.line, e.name, e.max_slots != 0 ? "max_slots" : "slots",
                        cap, per, s.topo.ranks, n, per));
      }
    });
  }
  s.topo.nodes = n;
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
