// memory_limit: a rank runs in its own cgroup (v1 memory controller) with a hard limit and no
// swap: past it the kernel's OOM killer ends the rank, as on a node whose memory runs out.
//
// With `device_arena` the limit is on the rank's host memory only: on a CPU rank the simulated
// device is the same RAM, so the harness creates an anonymous shared-memory file (memfd) of that
// size and allocates its pages itself (they are charged to the harness's cgroup, the first to
// fault them in), and the rank carves its device tensors out of it (FAULTLINE_DEVICE_ARENA,
// kernels/device_arena.hpp), opening it through /proc/<harness pid>/fd/<fd>. The file has no
// name: its pages go when the harness and the rank have let go of it, so a harness killed with
// SIGKILL leaves nothing in /dev/shm (issue 32).
// The rank's cgroup then counts what a GPU rank's host would hold: offloaded optimizer state,
// MPI, the process itself.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/rank_cgroup.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {

FAULTLINE_SETTING(kCgroupRoot, std::string, "FAULTLINE_CGROUP_ROOT", "/sys/fs/cgroup/memory",
                  "cgroup v1 memory hierarchy where memory_limit faults create their groups");

std::string memory_cgroup_root() {
  return kCgroupRoot.get();
}

namespace {

namespace pb = faultline::v1;

// On a node (MemoryLimit, MemoryStatus, MemoryRelease): each rank's memory cgroup made there, its
// processes moved in as they appear.
struct MemoryGroups : NodeState {
  Node& n;
  std::map<int, std::unique_ptr<RankCgroup>> groups;  // by rank
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
};

nlohmann::json memory_limit_on_node(Node& n, const pb::MemoryLimit& r) {
  const int rank = r.rank();
  const int64_t bytes = r.bytes();
  if (rank < 0) raise<Error>("memory_limit: rank {} is not a rank (0 or more)", rank);
  if (bytes < (1 << 20)) {
    raise<Error>("memory_limit: {} bytes is below 1 MiB (a process cannot start in it)", bytes);
  }
  auto& groups = n.state<MemoryGroups>().groups;
  if (groups.count(rank)) {
    raise<Error>("memory_limit: rank {} has a limit on {} already", rank, n.host());
  }
  auto g = RankCgroup::make("memory", rank, n.run_dir(), n.secret(), n.host(),
                            [&](Cgroup& cg) { limit_memory(cg, bytes); });
  g->bytes = bytes;
  // What the rank charged before it was moved comes along where the kernel still can.
  bool moves_charge = false;
  try {
    g->cg->write("memory.move_charge_at_immigrate", "1");
    moves_charge = true;
  } catch (const std::exception&) {
  }
  g->start();
  const std::string path = g->cg->path();
  groups[rank] = std::move(g);
  return {{"cgroup", path}, {"limit", bytes}, {"moves_charge", moves_charge}, {"host", n.host()}};
}

nlohmann::json memory_status(Node& n, const pb::MemoryStatus& r) {
  return n.state<MemoryGroups>().group(r.rank(), "memory_status").counters();
}

nlohmann::json memory_release(Node& n, const pb::MemoryRelease& r) {
  auto& m = n.state<MemoryGroups>();
  auto d = m.group(r.rank(), "memory_release").release();
  m.groups.erase(r.rank());
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
      lines.push_back(e.what());
    }
  }
  return lines;
}

std::vector<std::string> sweep_memory_groups() {
  const int n = sweep_stale_cgroups(kCgroupRoot.get());
  if (n <= 0) return {};
  return {fmt::format("removed {} cgroup(s) of agents or harnesses that are gone from {}", n,
                      kCgroupRoot.get())};
}

class MemoryLimitFault : public FaultOf<MemoryLimitFault> {
 public:
  int64_t bytes = 0;
  int64_t arena_bytes = 0;  // device_arena: 0 = none
  std::optional<Cgroup> group;
  int arena_fd = -1;  // the memfd backing the rank's device memory
  std::string arena;  // the path the rank opens it by: /proc/<harness pid>/fd/<arena_fd>
  // Through agents (agent_nodes.hpp; the *_on_host methods): those that made the group (the
  // rank's host; with launcher srun and no hosts every node's), and the one holding the rank
  // (-1: not known yet, Slurm placed it).
  std::vector<int> nodes;
  int node = -1;
  std::string host_group;  // the cgroup there
  nlohmann::json status;   // its counters, as the agent last reported them
  bool released = false;

  nlohmann::json params() const override {
    return {{"bytes", bytes}, {"device_arena", arena_bytes}};
  }

  // A memfd the harness holds, its pages allocated by the harness (charged to its cgroup).
  void make_arena(Host& h) {
    const std::string name = std::filesystem::path(group->path()).filename().string() + ".arena";
    arena_fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
    if (arena_fd < 0) raise("memory_limit device_arena: memfd_create: {}", std::strerror(errno));
    const int err = ::posix_fallocate(arena_fd, 0, arena_bytes);
    if (err != 0) {
      close_arena();
      raise("memory_limit device_arena: cannot allocate {} bytes of shared memory: {}", arena_bytes,
            std::strerror(err));
    }
    arena = fmt::format("/proc/{}/fd/{}", ::getpid(), arena_fd);
    h.record("device_arena", {{"bytes", arena_bytes}, {"file", arena}, {"memfd", name}}, rank,
             fmt::format("rank {} device memory: {} bytes of {} (memfd {}), charged to the harness",
                         rank, arena_bytes, arena, name));
  }

  void close_arena() {
    if (arena_fd >= 0) ::close(arena_fd);  // the rank's mapping, if any, keeps its pages
    arena_fd = -1;
    arena.clear();
  }

  void setup(Host& h) override {
    if (auto want = fault_nodes(h, rank); !want.empty()) return setup_on_host(h, want);
    if (const int n = sweep_stale_cgroups(kCgroupRoot.get()); n > 0) {
      h.hist.harness("cleanup", {{"stale_cgroups_removed", n}});
    }
    group.emplace(kCgroupRoot.get(), "FAULTLINE_CGROUP_ROOT", h.dir, rank, "memory_limit");
    limit_memory(*group, bytes);
    if (arena_bytes > 0) make_arena(h);
    h.record("memory_limit", {{"bytes", bytes}, {"cgroup", group->path()}, {"via", "local"}}, rank,
             fmt::format("rank {} limited to {} bytes (cgroup)", rank, bytes));
  }

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && group) l.spec.cgroup_procs.push_back(group->procs());
    if (r == rank && !arena.empty()) l.env["FAULTLINE_DEVICE_ARENA"] = arena;
  }

  // What the kernel says about the rank: its peak, failures to charge, OOM kills.
  void on_rank_exit(Host& h, int r) override {
    if (r == rank && !nodes.empty()) return report_on_host(h);
    if (r != rank || !group) return;
    const std::string oom = group->read("memory.oom_control");
    int64_t kills = 0;
    if (auto p = oom.find("oom_kill "); p != std::string::npos) {
      kills = std::atoll(oom.c_str() + p + 9);
    }
    h.hist.harness("cgroup_memory",
                   {{"limit", bytes},
                    {"max_usage", std::atoll(group->read("memory.max_usage_in_bytes").c_str())},
                    {"failcnt", std::atoll(group->read("memory.failcnt").c_str())},
                    {"oom_kills", kills}},
                   rank);
    if (kills > 0) h.hist.harness("oom_kill", {{"kills", kills}, {"cgroup", group->path()}}, rank);
  }

  void explain_exit(Host& h, int r, nlohmann::json& exit) override;
  void setup_on_host(Host& h, const std::vector<int>& want);
  nlohmann::json status_from_agents(Host& h);
  void report_on_host(Host& h);
  void heal_on_host(Host& h);
  void heal_on(Host& h, int n);

  void heal(Host& h, bool processes_gone) override {
    if (!nodes.empty()) return heal_on_host(h);
    if (processes_gone) close_arena();
    if (!processes_gone || !group || group->removed()) return;
    const bool gone = group->remove();
    try {
      h.hist.harness("fault_healed",
                     {{"fault", "memory_limit"}, {"cgroup", group->path()}, {"removed", gone}},
                     rank);
    } catch (...) {
    }
  }
};

// Through agents: each creates the cgroup, moves the rank's processes into it as they appear on
// its host (only the rank's host has any), reports its counters, and removes it
// (MemoryLimit above). Each node counts once its agent made the group: a later
// agent's failure leaves the groups made so far, and only those, for heal to remove.
void MemoryLimitFault::setup_on_host(Host& h, const std::vector<int>& want) {
  for (const int n : want) {
    const std::string host = node_name(h, n);
    pb::MemoryLimit req;
    req.set_rank(rank);
    req.set_bytes(bytes);
    const auto r = on_node(h, n, req, fmt::format("memory_limit on rank {}", rank));
    host_group = r.value("cgroup", "");
    nlohmann::json d = {
        {"bytes", bytes}, {"cgroup", host_group}, {"via", "agent"}, {"host", host}, {"agent", r}};
    if (want.size() > 1) d["placed_by"] = "slurm";  // this agent adopts the rank if it lands here
    nodes.push_back(n);
    if (want.size() == 1) node = n;
    h.record(
        "memory_limit", d, rank,
        fmt::format("rank {} limited to {} bytes (cgroup on {}, by its agent)", rank, bytes, host));
  }
}

// The counters of the agent holding the rank: with Slurm's placement, the first whose group
// took a process of the rank (that agent is the rank's from then on).
nlohmann::json MemoryLimitFault::status_from_agents(Host& h) {
  auto* a = h.box.agents();
  for (const int n : node >= 0 ? std::vector<int>{node} : nodes) {
    if (!a || !a->up(n)) continue;
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

void MemoryLimitFault::explain_exit(Host& h, int r, nlohmann::json& exit) {
  if (r != rank || nodes.empty() || released) return;
  status = status_from_agents(h);
  if (status.empty()) return;
  const auto pids = status.value("pids", std::vector<int>{});
  // The kernel's OOM killer ended the rank: its group counted a kill, and none of the processes
  // the agent moved in is alive. The killer's signal is always SIGKILL.
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

void MemoryLimitFault::report_on_host(Host& h) {
  if (status.empty() && !released) status = status_from_agents(h);
  if (status.empty()) return;
  const std::string host = node_name(h, node);
  const int64_t kills = status.value("oom_kills", int64_t{0});
  h.hist.harness("cgroup_memory",
                 {{"limit", bytes},
                  {"max_usage", status.value("max_usage", int64_t{0})},
                  {"failcnt", status.value("failcnt", int64_t{0})},
                  {"oom_kills", kills},
                  {"adopted_after_ms", status.value("adopted_after_ms", nlohmann::json::array())},
                  {"pids", status.value("pids", nlohmann::json::array())},
                  {"via", "agent"},
                  {"host", host}},
                 rank);
  if (kills > 0) {
    h.hist.harness("oom_kill",
                   {{"kills", kills}, {"cgroup", host_group}, {"via", "agent"}, {"host", host}},
                   rank);
  }
}

// Before teardown, while the agents are up: each moves what is left back and removes its group.
// A lost agent cannot; its group stays until the next agent on that host sweeps it.
void MemoryLimitFault::heal_on_host(Host& h) {
  if (released || nodes.empty()) return;
  released = true;
  for (const int n : nodes) heal_on(h, n);
}

void MemoryLimitFault::heal_on(Host& h, int n) {
  pb::MemoryRelease release;
  release.set_rank(rank);
  release_group(h, n, rank, "memory_limit", release, host_group,
                [](const nlohmann::json& r, nlohmann::json& d) {
                  d["oom_kills"] = r.value("oom_kills", 0);
                  d["max_usage"] = r.value("max_usage", 0);
                  d["pids"] = r.value("pids", nlohmann::json::array());  // the rank's processes
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
