// hide: a library is missing on one rank (a node without the package): each rank loads plugins
// from its own directory of links to the plugin directory, and a hidden library has no link.
// With topology.hosts the agent of the rank's host makes the directory from that host's plugins.
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/plugin_links.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;

class HideFault : public FaultOf<HideFault> {
 public:
  std::string library;
  // the ranks it was hidden from, and (topology.hosts) the host whose agent did it (-1: here)
  std::map<int, int> hidden;

  nlohmann::json params() const override { return {{"library", library}}; }
  std::string links(const Host& h, int r) const {
    return fmt::format("{}/ranks/rank{}/plugins", h.dir, r);
  }

  void setup(Host& h) override {
    if (!h.s.topo.hosts.empty()) return setup_on_hosts(h);
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      // The first hide fault links every library for every rank.
      if (rank >= 0 && rank != r) {
        link_plugins(h.plugin_dir, links(h, r));
        continue;
      }
      const auto d = hide_plugin(h.plugin_dir, links(h, r), library, "this machine");
      hidden[r] = -1;
      h.record("hide", {{"library", library}, {"dir", d["dir"]}, {"via", "local"}}, r,
               fmt::format("{} hidden from rank {}", library, r));
    }
  }

  // topology.hosts: the agent of each target rank's host links the rank's plugin directory to the
  // plugin directory as that host has it, less the library (a node without the package).
  void setup_on_hosts(Host& h) {
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      if (rank >= 0 && rank != r) continue;
      const int node = host_of_rank(h.s, r);
      const std::string host = node_name(h, node);
      auto& a = agent_for(h, node, fmt::format("hide on rank {}", r));
      HostFaultOp op{"hide_plugin", r};
      op.library = library;
      const auto d = a.host_fault(node, op);
      hidden[r] = node;
      h.record("hide",
               {{"library", library},
                {"dir", d.value("dir", "")},
                {"via", "agent"},
                {"host", host},
                {"agent", d}},
               r, fmt::format("{} hidden from rank {} on {}", library, r, host));
    }
  }

  // The link is back once the ranks are gone; on a host, while its agent is still up (the harness
  // heals before it stops the agents).
  void heal(Host& h, bool processes_gone) override {
    for (auto it = hidden.begin(); it != hidden.end();) {
      const auto [r, node] = *it;
      if (node < 0 && !processes_gone) {
        ++it;
        continue;
      }
      it = hidden.erase(it);
      nlohmann::json d = {{"fault", "hide"}, {"library", library}, {"dir", links(h, r)}};
      try {
        if (node < 0) {
          unhide_plugin(h.plugin_dir, links(h, r), library);
          d["via"] = "local";
        } else {
          const std::string host = node_name(h, node);
          d.update({{"via", "agent"}, {"host", host}});
          auto& a = agent_for(h, node, "hide", "the link stays out");
          HostFaultOp op{"unhide_plugin", r};
          op.library = library;
          a.host_fault(node, op);
        }
        h.hist.harness("fault_healed", d, r);
      } catch (const std::exception& e) {
        try {
          d["error"] = e.what();
          h.hist.harness("heal_error", d, r);
        } catch (...) {
        }
      }
    }
  }
};

class HideKind : public FaultKind {
 public:
  std::string key() const override { return "hide"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].hide", KeyType::kString, "",
             "Hide this library from `rank`: it is left out of the rank's plugin directory"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<HideFault>();
    if (slurm_places_ranks(c.s)) {
      loader::fail_at(c.file, item["hide"], c.at + ".hide",
                      needs_rank_node("hide",
                                      "the rank's plugin directory is made by its node's "
                                      "agent before the rank starts"));
    }
    f->library = item["hide"].as<std::string>();
    loader::check_relative(c.file, item["hide"], c.at + ".hide", f->library);
    // The library must be one the workers have: in the plugin directory, or one this build
    // makes when that is the build's own (not built yet is not unknown). An empty directory
    // elsewhere leaves the check to the run.
    const std::vector<std::string> have = plugin_libraries();
    if (!have.empty() && !std::binary_search(have.begin(), have.end(), f->library)) {
      loader::fail_at(c.file, item["hide"], c.at + ".hide",
                      fmt::format("no library '{}' in the plugin directory {} (allowed: {})",
                                  f->library, plugin_dir(), fmt::join(have, ", ")));
    }
    return f;
  }
};

}  // namespace

const FaultKind& hide_kind() {
  static const HideKind k;
  return k;
}

}  // namespace fl::harness::faults
