// hide: a library is missing on one rank (a node without the package): each rank loads plugins
// from its own directory of links to the plugin directory, and a hidden library has no link.
// With topology.hosts the agent of the rank's host makes the directory from that host's plugins
// (HidePlugin, UnhidePlugin below).
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/plugin_links.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/model/placement.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

// On a node: the libraries hidden from each rank, and the rank's directory of links.
struct Hidden : NodeState {
  Node& n;
  std::map<std::pair<int, std::string>, std::string> links;  // (rank, library) -> its links
  explicit Hidden(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
};

nlohmann::json hide_on_node(Node& n, const pb::HidePlugin& r) {
  if (r.rank() < 0) raise<Error>("hide_plugin: rank {} is not a rank (0 or more)", r.rank());
  const std::string links =
      run_path(n.run_dir(), fmt::format("ranks/rank{}/plugins", r.rank()), "hide_plugin");
  auto d = hide_plugin(plugin_dir(), links, r.library(), n.host());
  n.state<Hidden>().links[{r.rank(), r.library()}] = links;
  d["host"] = n.host();
  return d;
}

nlohmann::json unhide_on_node(Node& n, const pb::UnhidePlugin& r) {
  auto& hidden = n.state<Hidden>().links;
  auto it = hidden.find({r.rank(), r.library()});
  if (it == hidden.end()) {
    raise<Error>("unhide_plugin: '{}' was not hidden from rank {} by this agent on {}; refused",
                 r.library(), r.rank(), n.host());
  }
  auto d = unhide_plugin(plugin_dir(), it->second, r.library());
  hidden.erase(it);
  d["host"] = n.host();
  return d;
}

std::vector<std::string> Hidden::cleanup() {
  std::vector<std::string> lines;
  while (!links.empty()) {
    pb::UnhidePlugin unhide;
    unhide.set_rank(links.begin()->first.first);
    unhide.set_library(links.begin()->first.second);
    try {
      lines.push_back("unhide_plugin " + unhide_on_node(n, unhide).dump());
    } catch (const std::exception& e) {
      links.erase({unhide.rank(), unhide.library()});
      lines.push_back(e.what());
    }
  }
  return lines;
}

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
      const int node = host_of_rank(h.s.topo, r);
      const std::string host = node_name(h, node);
      pb::HidePlugin req;
      req.set_rank(r);
      req.set_library(library);
      const auto d = on_node(h, node, req, fmt::format("hide on rank {}", r));
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
          pb::UnhidePlugin req;
          req.set_rank(r);
          req.set_library(library);
          on_node(h, node, req, "hide", "the link stays out");
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
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::HidePlugin> hide(&hide_on_node);
    static const NodeHandlerOf<pb::UnhidePlugin> unhide(&unhide_on_node);
    return {&hide, &unhide};
  }
};

}  // namespace

const FaultKind& hide_kind() {
  static const HideKind k;
  return k;
}

}  // namespace fl::harness::faults
