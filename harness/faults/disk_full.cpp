// disk_full: a directory of the run is a small filesystem (a tmpfs in the run's mount namespace):
// writes fail with ENOSPC once it fills (a checkpoint to a full disk). With topology.hosts the
// hosts' agents mount it on their own host instead.
#include <filesystem>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class DiskFullFault : public FaultOf<DiskFullFault> {
 public:
  std::string path = "checkpoints";  // run-directory relative
  int64_t bytes = 64 * 1024;
  bool mounted = false;

  nlohmann::json params() const override { return {{"path", path}, {"size_bytes", bytes}}; }
  std::vector<int> nodes;  // the hosts (launcher srun: the nodes) whose agents mounted it

  void setup(Host& h) override {
    if (!fault_nodes(h, rank).empty()) return setup_on_hosts(h);
    const std::string where = h.dir + "/" + path;
    std::filesystem::create_directories(where);
    run_tool(h.box.in_mount({"mount", "-t", "tmpfs", "-o", fmt::format("size={},mode=0755", bytes),
                             "faultline-disk-full", where}));
    mounted = true;
    h.record("disk_full", {{"path", path}, {"size_bytes", bytes}, {"via", "local"}}, -1,
             fmt::format("{} is a {}-byte filesystem", path, bytes));
  }

  // Through agents (agent_nodes.hpp): the agent of `rank`'s host (of every host, or with launcher
  // srun every node, without a rank) mounts the tmpfs there, where that host's ranks see it
  // (harness/agent/agent_faults.cpp).
  void setup_on_hosts(Host& h) {
    for (int node : fault_nodes(h, rank)) {
      const std::string host = node_name(h, node);
      auto& a = agent_for(h, node, "disk_full");
      HostFaultOp op{"disk_full"};
      op.path = path;
      op.bytes = bytes;
      const auto r = a.host_fault(node, op);
      nodes.push_back(node);
      h.record(
          "disk_full",
          {{"path", path}, {"size_bytes", bytes}, {"via", "agent"}, {"host", host}, {"agent", r}},
          rank, fmt::format("{} is a {}-byte filesystem on {}", path, bytes, host));
    }
  }

  void heal(Host& h, bool) override {
    for (int node : nodes) {
      const std::string host = node_name(h, node);
      try {
        auto& a = agent_for(h, node, "disk_full", "the next agent there unmounts it");
        HostFaultOp op{"disk_free"};
        op.path = path;
        const auto r = a.host_fault(node, op);
        h.hist.harness("fault_healed", {{"fault", "disk_full"},
                                        {"path", r.value("unmounted", path)},
                                        {"via", "agent"},
                                        {"host", host}});
      } catch (const std::exception& e) {
        try {
          h.hist.harness("heal_error",
                         {{"fault", "disk_full"}, {"host", host}, {"error", e.what()}});
        } catch (...) {
        }
      }
    }
    nodes.clear();
    if (!mounted) return;
    mounted = false;
    const std::string where = h.dir + "/" + path;
    try {
      run_tool(h.box.in_mount({"umount", "-l", where}));
      h.hist.harness("fault_healed", {{"fault", "disk_full"}, {"path", where}, {"via", "local"}});
    } catch (const std::exception& e) {
      try {
        h.hist.harness("heal_error", {{"fault", "disk_full"}, {"error", e.what()}});
      } catch (...) {
      }
    }
  }
};

class DiskFullKind : public FaultKind {
 public:
  std::string key() const override { return "disk_full"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].disk_full", KeyType::kSection, "",
         "A small filesystem (tmpfs) under a run directory"},
        {"faults[].disk_full.path", KeyType::kString, "checkpoints",
         "Directory relative to the run directory"},
        {"faults[].disk_full.size", KeyType::kString, "64k", "Its size (bytes; k, m, g suffixes)"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<DiskFullFault>();
    const auto n = item["disk_full"];
    f->path = loader::opt<std::string>(n, "path", "checkpoints");
    loader::check_relative(c.file, n["path"], c.at + ".disk_full.path", f->path);
    if (n["size"]) f->bytes = loader::parse_size(c.file, n["size"], c.at + ".disk_full.size");
    if (slurm_places_ranks(c.s) && item["rank"] && item["rank"].as<int>() >= 0) {
      loader::fail_at(c.file, item["rank"], c.at + ".rank",
                      needs_rank_node("disk_full on one rank",
                                      "a filesystem mounted on every node would fill the other "
                                      "ranks' disks too (leave rank out for every node)"));
    }
    return f;
  }
};

}  // namespace

const FaultKind& disk_full_kind() {
  static const DiskFullKind k;
  return k;
}

}  // namespace fl::harness::faults
