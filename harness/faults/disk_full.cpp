// disk_full: a directory of the run is a small filesystem (a tmpfs): writes fail with ENOSPC once
// it fills (a checkpoint to a full disk). The node of the rank's host mounts it (DiskFull and
// DiskFree, handled below): this machine's in the run's mount namespace, every rank's, another
// host's agent on its own host, where that host's ranks see it.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace pb = faultline::v1;

// On a node: the tmpfs mounts this node made, by run-directory relative path.
constexpr const char* kDiskSource = "faultline-disk-full.";  // + the agent's pid

struct DiskMounts : NodeState {
  Node& n;
  std::map<std::string, std::string> mounts;  // rel -> absolute
  explicit DiskMounts(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
};

nlohmann::json disk_full(Node& n, const pb::DiskFull& r) {
  auto& m = n.state<DiskMounts>();
  const std::string where = run_path(n.run_dir(), r.path(), "disk_full");
  if (r.bytes() <= 0) raise<Error>("disk_full: size {} is not above 0", r.bytes());
  if (m.mounts.count(r.path())) {
    raise<Error>("disk_full: {} is mounted by this agent already", where);
  }
  std::filesystem::create_directories(where);
  const std::string opts = fmt::format("size={},mode=0755", r.bytes());
  if (Sandbox* box = n.sandbox()) {
    // This machine: the run's mount namespace, which every rank here enters at spawn.
    run_tool(box->in_mount({"mount", "-t", "tmpfs", "-o", opts, "faultline-disk-full", where}));
    m.mounts[r.path()] = where;
    return {{"mount", where}, {"fs", "tmpfs"}, {"size_bytes", r.bytes()}, {"host", n.host()}};
  }
  // The source names this agent: the next agent on the host removes it should this one die.
  const std::string source = fmt::format("{}{}", kDiskSource, ::getpid());
  if (::mount(source.c_str(), where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    raise<Error>("disk_full: cannot mount a tmpfs ({}) on {}: {}", opts, where,
                 std::strerror(errno));
  }
  m.mounts[r.path()] = where;
  return {{"mount", where}, {"fs", "tmpfs"}, {"size_bytes", r.bytes()}, {"host", n.host()}};
}

nlohmann::json disk_free(Node& n, const pb::DiskFree& r) {
  auto& m = n.state<DiskMounts>();
  auto it = m.mounts.find(r.path());
  if (it == m.mounts.end()) {
    raise<Error>("disk_free: '{}' is not a mount this agent made on {}; refused", r.path(),
                 n.host());
  }
  const std::string where = it->second;
  if (Sandbox* box = n.sandbox()) {
    // Gone with the run's mount namespace once its holder ended (Sandbox::check_gone).
    if (box->has_mounts()) run_tool(box->in_mount({"umount", "-l", where}));
    m.mounts.erase(it);
    return {{"unmounted", where}, {"host", n.host()}};
  }
  if (::umount2(where.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    raise<Error>("disk_free: cannot unmount {}: {}", where, std::strerror(errno));
  }
  m.mounts.erase(it);
  return {{"unmounted", where}, {"host", n.host()}};
}

std::vector<std::string> DiskMounts::cleanup() {
  std::vector<std::string> lines;
  while (!mounts.empty()) {
    pb::DiskFree free;
    free.set_path(mounts.begin()->first);
    try {
      lines.push_back("disk_free " + disk_free(n, free).dump());
    } catch (const std::exception& e) {
      mounts.erase(free.path());
      lines.push_back(e.what());
    }
  }
  return lines;
}

// The tmpfs mounts of agents that are gone. /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT
// MOUNTPOINT OPTS... - FSTYPE SOURCE SUPEROPTS".
std::vector<std::string> sweep_stale_mounts() {
  std::ifstream info("/proc/self/mountinfo");
  std::vector<std::string> stale, lines;
  for (std::string line; std::getline(info, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string f, point, fstype, source;
    for (int i = 0; i < 5 && head >> f; ++i) point = f;
    tail >> fstype >> source;
    if (fstype != "tmpfs" || source.rfind(kDiskSource, 0) != 0) continue;
    const std::string owner_s = source.substr(std::strlen(kDiskSource));
    if (owner_s.empty() || owner_s.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t owner = std::atoi(owner_s.c_str());
    if (owner <= 0 || owner == ::getpid() || ::kill(owner, 0) == 0 || errno == EPERM) continue;
    stale.push_back(point);
  }
  for (const auto& point : stale) {
    const bool ok = ::umount2(point.c_str(), MNT_DETACH) == 0;
    lines.push_back(ok ? fmt::format("unmounted {} (its agent is gone)", point)
                       : fmt::format("cannot unmount {}: {}", point, std::strerror(errno)));
  }
  return lines;
}

class DiskFullFault : public FaultOf<DiskFullFault> {
 public:
  std::string path = "checkpoints";  // run-directory relative
  int64_t bytes = 64 * 1024;

  nlohmann::json params() const override { return {{"path", path}, {"size_bytes", bytes}}; }
  std::vector<int> nodes;  // the nodes that mounted it

  // The node of `rank`'s host (every host's, or with launcher srun every node's, without a rank;
  // this machine's without hosts) mounts the tmpfs there (agent_nodes.hpp).
  void setup(Host& h) override {
    pb::DiskFull req;
    req.set_path(path);
    req.set_bytes(bytes);
    for (int node : nodes_of(h, rank)) {
      const auto r = on_node(h, node, req, "disk_full");
      nodes.push_back(node);
      if (in_process(h, node)) {
        h.record("disk_full", {{"path", path}, {"size_bytes", bytes}, {"via", "local"}}, -1,
                 fmt::format("{} is a {}-byte filesystem", path, bytes));
        continue;
      }
      const std::string host = node_name(h, node);
      h.record(
          "disk_full",
          {{"path", path}, {"size_bytes", bytes}, {"via", "agent"}, {"host", host}, {"agent", r}},
          rank, fmt::format("{} is a {}-byte filesystem on {}", path, bytes, host));
    }
  }

  void heal(Host& h, bool) override {
    for (int node : nodes) {
      const bool local = in_process(h, node);
      nlohmann::json d = {{"fault", "disk_full"}};
      if (!local) d["host"] = node_name(h, node);
      try {
        pb::DiskFree req;
        req.set_path(path);
        const auto r = on_node(h, node, req, "disk_full", "the next agent there unmounts it");
        d["path"] = local ? h.dir + "/" + path : r.value("unmounted", path);
        d["via"] = local ? "local" : "agent";
        h.hist.harness("fault_healed", d);
      } catch (const std::exception& e) {
        try {
          d["error"] = e.what();
          h.hist.harness("heal_error", d);
        } catch (...) {
        }
      }
    }
    nodes.clear();
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
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::DiskFull> mount(&disk_full, &sweep_stale_mounts);
    static const NodeHandlerOf<pb::DiskFree> unmount(&disk_free);
    return {&mount, &unmount};
  }
};

}  // namespace

const FaultKind& disk_full_kind() {
  static const DiskFullKind k;
  return k;
}

}  // namespace fl::harness::faults
