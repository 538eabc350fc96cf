#include "harness/process/hosts.hpp"

#include <future>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/model/placement.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

namespace {
constexpr int kReachS = 10;
}

std::vector<std::string> on_host(const Scenario& s, const std::string& host,
                                 std::vector<std::string> argv) {
  std::vector<std::string> out;
  if (s.topo.rsh_agent.empty()) {
    // Never ask for a password, never hang on a host that does not answer.
    out = {"ssh", "-o", "BatchMode=yes", "-o", fmt::format("ConnectTimeout={}", kReachS)};
  } else {
    out = {s.topo.rsh_agent};
  }
  out.push_back(host);
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void check_hosts(const Scenario& s) {
  std::vector<std::future<ToolOutcome>> probes;
  for (const auto& h : s.topo.hosts) {
    auto argv = on_host(s, h, {"true"});
    argv.insert(argv.begin(), {"timeout", "-k", "2", std::to_string(kReachS)});
    probes.push_back(std::async(std::launch::async, [argv] {
      try {
        return run_tool_status(argv);
      } catch (const std::exception& e) {
        return ToolOutcome{127, e.what()};
      }
    }));
  }
  std::vector<std::string> bad;
  for (size_t i = 0; i < probes.size(); ++i) {
    ToolOutcome o = probes[i].get();
    if (o.status == 0) continue;
    while (!o.output.empty() && (o.output.back() == '\n' || o.output.back() == '\r')) {
      o.output.pop_back();
    }
    const std::string why =
        o.status == 124 ? fmt::format("no answer within {} s", kReachS)
                        : fmt::format("status {}{}", o.status,
                                      o.output.empty() ? "" : ": " + o.output.substr(0, 300));
    bad.push_back(fmt::format("{} ({})", s.topo.hosts[i], why));
  }
  if (!bad.empty()) {
    // The loader wrote the hostfile's absolute path into the resolved scenario.
    const YAML::Node t = s.resolved["topology"];
    const std::string hostfile =
        t && t["hostfile"] ? t["hostfile"].as<std::string>() : std::string();
    std::string list;
    for (auto& b : bad) list += (list.empty() ? "" : "; ") + b;
    raise<Error>(
        "{}: {} of {} host(s) cannot be reached through {}: {}; nothing was "
        "launched",
        hostfile.empty() ? std::string("topology.hosts") : "topology.hostfile " + hostfile,
        bad.size(), s.topo.hosts.size(),
        s.topo.rsh_agent.empty() ? std::string("ssh (topology.rsh_agent)") : s.topo.rsh_agent,
        list);
  }
}

std::vector<std::string> mpirun_host_options(const Scenario& s) {
  if (s.topo.hosts.empty()) return {};
  const int per = ranks_per_node(s.topo.ranks, static_cast<int>(s.topo.hosts.size()));
  std::string list;
  for (const auto& h : s.topo.hosts)
    list += fmt::format("{}{}:{}", list.empty() ? "" : ",", h, per);
  std::vector<std::string> out = {"--host", list};
  if (!s.topo.rsh_agent.empty())
    out.insert(out.end(), {"--mca", "plm_rsh_agent", s.topo.rsh_agent});
  return out;
}

std::string appfile_host_option(const Scenario& s, int rank) {
  if (s.topo.hosts.empty()) return "";
  return " --host " + s.topo.hosts.at(static_cast<size_t>(host_of_rank(s.topo, rank)));
}

}  // namespace fl::harness
