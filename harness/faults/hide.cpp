// hide: a library is missing on one rank (a node without the package): each rank loads plugins
// from its own directory of links to the plugin directory, and a hidden library has no link.
// The rank's node makes the directory from its own plugins (HidePlugin, UnhidePlugin below): this
// machine in the harness's process, or the agent of the rank's host (topology.hosts).
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

std::string rank_links(const Node& n, int rank) {
  if (rank < 0) raise<Error>("hide_plugin: rank {} is not a rank (0 or more)", rank);
  return run_path(n.run_dir(), fmt::format("ranks/rank{}/plugins", rank), "hide_plugin");
}

nlohmann::json hide_on_node(Node& n, const pb::HidePlugin& r) {
  const std::string links = rank_links(n, r.rank());
  std::vector<std::string> others;  // every rank checked before anything is made
  for (const int other : r.also_link()) others.push_back(rank_links(n, other));
  for (const auto& o : others) link_plugins(plugin_dir(), o);
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
  std::map<int, int> hidden;  // the ranks it was hidden from, and the node that did it

  nlohmann::json params() const override { return {{"library", library}}; }

  // The node of each target rank links the rank's plugin directory to the plugin directory as that
  // node has it, less the library (a node without the package), and every other rank's of the
  // node to all of it (the first hide fault there does).
  void setup(Host& h) override {
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      if (rank >= 0 && rank != r) continue;
      const int node = nodes_of(h, r).front();
      pb::HidePlugin req;
      req.set_rank(r);
      req.set_library(library);
      for (int o = 0; o < h.s.topo.ranks; ++o) {
        if (rank >= 0 && o != r && host_of_rank(h.s.topo, o) == host_of_rank(h.s.topo, r)) {
          req.add_also_link(o);
        }
      }
      const auto d = on_node(h, node, req, fmt::format("hide on rank {}", r));
      hidden[r] = node;
      nlohmann::json rec = {{"library", library}, {"dir", d.value("dir", "")}};
      rec.update(where(h, node, d));
      h.record("hide", rec, r,
               fmt::format("{} hidden from rank {}{}", library, r, on_host(h, node)));
    }
  }

  // The link is back once the ranks are gone; on a host, while its agent is still up (the harness
  // heals before it stops the agents).
  void heal(Host& h, bool processes_gone) override {
    for (auto it = hidden.begin(); it != hidden.end();) {
      const auto [r, node] = *it;
      if (!processes_gone && in_process(h, node)) {
        ++it;
        continue;
      }
      it = hidden.erase(it);
      nlohmann::json d = {{"fault", "hide"},
                          {"library", library},
                          {"dir", fmt::format("{}/ranks/rank{}/plugins", h.dir, r)}};
      try {
        d.update(where(h, node));
        pb::UnhidePlugin req;
        req.set_rank(r);
        req.set_library(library);
        on_node(h, node, req, "hide", "the link stays out");
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
