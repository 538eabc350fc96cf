// memory_limit: a rank runs in its own cgroup (v1 memory controller or v2) with a hard limit and no
// swap: past it the kernel's OOM killer ends the rank, as on a node whose memory runs out. The
// node of the rank's host (this machine's in-process node, or the agent of the rank's host) makes
// the group, places the rank in it, reports its counters and removes it (MemoryLimit,
// MemoryStatus, MemoryRelease below).
//
// With `device_arena` the limit is on the rank's host memory only: on a CPU rank the simulated
// device is the same RAM, so the node creates an anonymous shared-memory file (memfd) of that
// size and allocates its pages itself (they are charged to its process's cgroup, the first to
// fault them in: on this machine the harness's), and the rank carves its device tensors out of it
// (FAULTLINE_DEVICE_ARENA, kernels/device_arena.hpp), opening it through /proc/PID/fd/FD (the
// node's process). The file has no name: its pages go when the node and the rank have let go of
// it, so a harness killed with SIGKILL leaves nothing in /dev/shm (issue 32). The rank's cgroup
// then counts what a GPU rank's host would hold: offloaded optimizer state, MPI, the process.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/rank_cgroup.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {

FAULTLINE_SETTING(kCgroupRoot, std::string, "FAULTLINE_CGROUP_ROOT", "auto",
                  "cgroup hierarchy (v1 memory or v2) where memory_limit faults create their "
                  "groups; auto: /sys/fs/cgroup/memory if the host mounts cgroup v1's, else the "
                  "v2 hierarchy");

std::string memory_cgroup_root() {
  const std::string root = kCgroupRoot.get();
  return root == "auto" ? auto_cgroup_root("memory") : root;
}

namespace {

namespace pb = faultline::v1;

// On a node (MemoryLimit, MemoryStatus, MemoryRelease): each rank's memory cgroup made there, its
// processes placed in it, and the device arena held for it (a memfd; -1: none).
struct MemoryGroups : NodeState {
  Node& n;
  std::map<int, std::unique_ptr<RankCgroup>> groups;  // by rank
  std::map<int, int> arenas;                          // by rank: the memfd
  explicit MemoryGroups(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
  RankCgroup& group(int rank, const std::string& what) {
    auto it = groups.find(rank);
    if (it == groups.end()) {
      raise<Error>(
          "{}: rank {} has no memory cgroup of this agent on {} (refused: the agent touches "
          "only the groups it made)",
          what, rank, n.host());
    }
    return *it->second;
  }
  // A memfd of `bytes` this node's process holds for `rank`, its pages allocated here (charged to
  // this process's cgroup): the file the rank opens it by, and its name.
  nlohmann::json make_arena(int rank, const std::string& name, int64_t bytes);
  // Closes the rank's memfd (the rank's mapping, if any, keeps its pages): whether there was one.
  bool close_arena(int rank);
};

nlohmann::json MemoryGroups::make_arena(int rank, const std::string& name, int64_t bytes) {
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) raise("memory_limit device_arena: memfd_create: {}", std::strerror(errno));
  if (const int err = ::posix_fallocate(fd, 0, bytes); err != 0) {
    ::close(fd);
    raise("memory_limit device_arena: cannot allocate {} bytes of shared memory on {}: {}", bytes,
          n.host(), std::strerror(err));
  }
  arenas[rank] = fd;
  return {
      {"bytes", bytes}, {"file", fmt::format("/proc/{}/fd/{}", ::getpid(), fd)}, {"memfd", name}};
}

bool MemoryGroups::close_arena(int rank) {
  const auto it = arenas.find(rank);
  if (it == arenas.end()) return false;
  ::close(it->second);
  arenas.erase(it);
  return true;
}

nlohmann::json memory_release(Node& n, const pb::MemoryRelease& r);

nlohmann::json memory_limit_on_node(Node& n, const pb::MemoryLimit& r) {
  const int rank = r.rank();
  const int64_t bytes = r.bytes();
  if (rank < 0) raise<Error>("memory_limit: rank {} is not a rank (0 or more)", rank);
  if (bytes < (1 << 20)) {
    raise<Error>("memory_limit: {} bytes is below 1 MiB (a process cannot start in it)", bytes);
  }
  if (r.device_arena() < 0) {
    raise<Error>("memory_limit: a device arena of {} bytes (0: none, else above 0)",
                 r.device_arena());
  }
  auto& m = n.state<MemoryGroups>();
  if (m.groups.count(rank)) {
    raise<Error>("memory_limit: rank {} has a limit on {} already", rank, n.host());
  }
  auto g = RankCgroup::make("memory", rank, n, [&](Cgroup& cg) { limit_memory(cg, bytes); });
  g->bytes = bytes;
  // What the rank charged before it was moved comes along where the kernel still can.
  bool moves_charge = false;
  try {
    if (!g->cg->v2()) {  // v2 never moves charges: what the rank used before stays outside
      g->cg->write("memory.move_charge_at_immigrate", "1");
      moves_charge = true;
    }
  } catch (const std::exception&) {
  }
  g->place();
  const std::string path = g->cg->path();
  nlohmann::json d = {{"cgroup", path},
                      {"limit", bytes},
                      {"moves_charge", moves_charge},
                      {"placed", g->at_spawn ? "at_spawn" : "moved_in"},
                      {"stale_cgroups_removed", g->swept},
                      {"host", n.host()}};
  m.groups[rank] = std::move(g);
  if (r.device_arena() == 0) return d;
  try {
    const std::string name = std::filesystem::path(path).filename().string() + ".arena";
    d["arena"] = m.make_arena(rank, name, r.device_arena());
  } catch (...) {
    pb::MemoryRelease release;  // no limit without the arena asked for
    release.set_rank(rank);
    memory_release(n, release);
    throw;
  }
  return d;
}

nlohmann::json memory_status(Node& n, const pb::MemoryStatus& r) {
  return n.state<MemoryGroups>().group(r.rank(), "memory_status").counters();
}

nlohmann::json memory_release(Node& n, const pb::MemoryRelease& r) {
  auto& m = n.state<MemoryGroups>();
  auto d = m.group(r.rank(), "memory_release").release();
  m.groups.erase(r.rank());
  d["arena_closed"] = m.close_arena(r.rank());
  return d;
}

std::vector<std::string> MemoryGroups::cleanup() {
  std::vector<std::string> lines;
  while (!groups.empty()) {
    pb::MemoryRelease release;
    release.set_rank(groups.begin()->first);
    try {
      lines.push_back("memory_release " + memory_release(n, release).dump());
    } catch (const std::exception& e) {
      groups.erase(release.rank());
      close_arena(release.rank());
      lines.push_back(e.what());
    }
  }
  return lines;
}

std::vector<std::string> sweep_memory_groups() {
  const int n = sweep_stale_cgroups(memory_cgroup_root());
  if (n <= 0) return {};
  return {fmt::format("removed {} cgroup(s) of agents or harnesses that are gone from {}", n,
                      memory_cgroup_root())};
}

class MemoryLimitFault : public FaultOf<MemoryLimitFault> {
 public:
  int64_t bytes = 0;
  int64_t arena_bytes = 0;  // device_arena: 0 = none
  std::string arena;        // the file the rank opens its device memory by (the node's memfd)
  // The nodes that made the group (nodes_of: this machine's in-process node, the rank's host's
  // agent, or with launcher srun and no hosts every node's agent), and the one holding the rank
  // (-1: not known yet, Slurm placed it).
  std::vector<int> nodes;
  int node = -1;
  std::string group_path;  // the cgroup there
  nlohmann::json status;   // its counters, as the node last reported them
  bool released = false;

  nlohmann::json params() const override {
    return {{"bytes", bytes}, {"device_arena", arena_bytes}};
  }

  void setup(Host& h) override;
  void record_arena(Host& h, int n, const nlohmann::json& a);

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && !arena.empty()) l.env["FAULTLINE_DEVICE_ARENA"] = arena;
  }

  // What the kernel says about the rank: its peak, failures to charge, OOM kills.
  void on_rank_exit(Host& h, int r) override {
    if (r == rank) report(h);
  }

  void explain_exit(Host& h, int r, nlohmann::json& exit) override;
  nlohmann::json status_from_nodes(Host& h);
  void report(Host& h);
  void heal(Host& h, bool processes_gone) override;
  void heal_on(Host& h, int n);
};

// Each node creates the cgroup and places the rank's processes in it (only the rank's host has
// any) (MemoryLimit above). Each node counts once it made the group: a later node's failure
// leaves the groups made so far, and only those, for heal to remove.
void MemoryLimitFault::setup(Host& h) {
  const auto want = nodes_of(h, rank);
  for (const int n : want) {
    pb::MemoryLimit req;
    req.set_rank(rank);
    req.set_bytes(bytes);
    req.set_device_arena(arena_bytes);
    const auto r = on_node(h, n, req, fmt::format("memory_limit on rank {}", rank));
    group_path = r.value("cgroup", "");
    nodes.push_back(n);
    if (want.size() == 1) node = n;
    note_swept(h, n, r);
    if (r.contains("arena")) record_arena(h, n, r["arena"]);
    nlohmann::json d = {{"bytes", bytes}, {"cgroup", group_path}};
    d.update(where(h, n, r));
    if (want.size() > 1) d["placed_by"] = "slurm";  // this agent adopts the rank if it lands here
    h.record("memory_limit", d, rank,
             fmt::format("rank {} limited to {} bytes (cgroup{})", rank, bytes, on_host(h, n)));
  }
}

void MemoryLimitFault::record_arena(Host& h, int n, const nlohmann::json& a) {
  arena = a.value("file", "");
  nlohmann::json d = a;
  d.update(where(h, n));
  h.record("device_arena", d, rank,
           fmt::format("rank {} device memory: {} bytes of {} (memfd {}), charged to the node's "
                       "process{}",
                       rank, arena_bytes, arena, a.value("memfd", ""), on_host(h, n)));
}

// The counters of the node holding the rank: with Slurm's placement, the first whose group
// took a process of the rank (that agent is the rank's from then on).
nlohmann::json MemoryLimitFault::status_from_nodes(Host& h) {
  for (const int n : node >= 0 ? std::vector<int>{node} : nodes) {
    if (!reachable(h, n)) continue;
    pb::MemoryStatus req;
    req.set_rank(rank);
    auto st = on_node(h, n, req, "memory_limit");
    if (node >= 0 || !st.value("pids", nlohmann::json::array()).empty()) {
      node = n;
      return st;
    }
  }
  return {};
}

// A rank whose end the harness saw only through its launcher (mpirun over hosts): the node that
// moved its processes in knows whether the OOM killer ended them. (A rank placed at spawn is the
// harness's own child, whose end it saw itself: no pids were moved in, nothing is added.)
void MemoryLimitFault::explain_exit(Host& h, int r, nlohmann::json& exit) {
  if (r != rank || released) return;
  status = status_from_nodes(h);
  if (status.empty()) return;
  const auto pids = status.value("pids", std::vector<int>{});
  // The kernel's OOM killer ended the rank: its group counted a kill, and none of the processes
  // the node moved in is alive. The killer's signal is always SIGKILL.
  if (status.value("oom_kills", 0) > 0 && !pids.empty() && status["alive"].empty()) {
    exit["class"] = "signal";
    exit["code"] = 9;
    exit["signaled"] = true;
    exit["signal"] = "SIGKILL";
    exit["by_harness"] = false;
    exit["pid"] = pids.back();
    exit["note"] = fmt::format(
        "killed by the kernel OOM killer in its memory cgroup on {} (the agent counted {} kill(s) "
        "there and the rank's process gone)",
        node_name(h, node), status.value("oom_kills", 0));
  }
}

// At each of the rank's exits: its group's counters now (once released, those of the release).
void MemoryLimitFault::report(Host& h) {
  if (!released) {
    if (auto st = status_from_nodes(h); !st.empty()) status = std::move(st);
  }
  if (status.empty()) return;
  const int64_t kills = status.value("oom_kills", int64_t{0});
  nlohmann::json d = {
      {"limit", bytes},
      {"max_usage", status.value("max_usage", int64_t{0})},
      {"failcnt", status.value("failcnt", int64_t{0})},
      {"oom_kills", kills},
      {"adopted_after_ms", status.value("adopted_after_ms", nlohmann::json::array())},
      {"pids", status.value("pids", nlohmann::json::array())},
      {"placed", status.value("placed", "")}};
  d.update(where(h, node));
  h.hist.harness("cgroup_memory", d, rank);
  if (kills > 0) {
    nlohmann::json k = {{"kills", kills}, {"cgroup", group_path}};
    k.update(where(h, node));
    h.hist.harness("oom_kill", k, rank);
  }
}

// At the first heal (on an agent's host while the agent is up, before teardown): each node moves
// what is left back, removes its group and closes the rank's arena. A lost agent cannot; its group
// stays until the next agent on that host sweeps it.
void MemoryLimitFault::heal(Host& h, bool) {
  if (released || nodes.empty()) return;
  released = true;
  for (const int n : nodes) heal_on(h, n);
}

void MemoryLimitFault::heal_on(Host& h, int n) {
  pb::MemoryRelease release;
  release.set_rank(rank);
  release_group(h, n, rank, "memory_limit", release, group_path,
                [&](const nlohmann::json& r, nlohmann::json& d) {
                  d["oom_kills"] = r.value("oom_kills", 0);
                  d["max_usage"] = r.value("max_usage", 0);
                  d["pids"] = r.value("pids", nlohmann::json::array());  // the rank's processes
                  // A rank still running ends in teardown: its exit reports these counters.
                  if (n == node || (node < 0 && !d["pids"].empty())) {
                    node = n;
                    status = r;
                  }
                });
}

class MemoryLimitKind : public FaultKind {
 public:
  std::string key() const override { return "memory_limit"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].memory_limit", KeyType::kString, "",
             "Memory limit of `rank` (cgroup; k, m, g suffixes): the kernel OOM killer ends it"},
            {"faults[].device_arena", KeyType::kString, "",
             "With memory_limit: bytes of tmpfs (k, m, g suffixes) the harness allocates for the "
             "rank's device tensors, so the limit counts only its host memory"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<MemoryLimitFault>();
    f->bytes = loader::parse_size(c.file, item["memory_limit"], c.at + ".memory_limit");
    if (item["device_arena"]) {
      f->arena_bytes = loader::parse_size(c.file, item["device_arena"], c.at + ".device_arena");
      if (f->arena_bytes <= 0) {
        loader::fail_at(c.file, item, c.at + ".device_arena",
                        "a device arena needs a size above 0 (k, m, g suffixes)");
      }
    }
    if (!item["rank"] || item["rank"].as<int>() < 0) {
      loader::fail_at(c.file, item, c.at + ".rank", "a memory limit needs a rank (0 or more)");
    }
    if ((!c.s.topo.hosts.empty() || c.s.topo.launcher == "srun") && f->arena_bytes > 0) {
      loader::fail_at(c.file, item["device_arena"], c.at + ".device_arena",
                      "a device arena is not supported with topology.hosts or launcher srun (the "
                      "harness would hold it on its own machine); leave device_arena out");
    }
    if (!c.rank_processes(c.s.topo.launcher) && c.s.topo.hosts.empty() &&
        !slurm_places_ranks(c.s)) {
      loader::fail_at(
          c.file, item, c.at + ".memory_limit",
          "a per-rank memory limit needs topology.launcher: " + c.rank_process_launchers() +
              ", topology.hosts or launcher srun (the agent of the rank's host or node applies "
              "it)");
    }
    return f;
  }
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::MemoryLimit> limit(&memory_limit_on_node, &sweep_memory_groups);
    static const NodeHandlerOf<pb::MemoryStatus> status(&memory_status);
    static const NodeHandlerOf<pb::MemoryRelease> release(&memory_release);
    return {&limit, &status, &release};
  }
};

}  // namespace

const FaultKind& memory_limit_kind() {
  static const MemoryLimitKind k;
  return k;
}

}  // namespace fl::harness::faults
