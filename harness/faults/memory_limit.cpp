// memory_limit: a rank runs in its own cgroup (v1 memory controller) with a hard limit and no
// swap: past it the kernel's OOM killer ends the rank, as on a node whose memory runs out.
//
// With `device_arena` the limit is on the rank's host memory only: on a CPU rank the simulated
// device is the same RAM, so the harness creates a tmpfs file of that size and allocates its
// pages itself (they are charged to the harness's cgroup, the first to fault them in), and the
// rank carves its device tensors out of it (FAULTLINE_DEVICE_ARENA, kernels/device_arena.hpp).
// The rank's cgroup then counts what a GPU rank's host would hold: offloaded optimizer state,
// MPI, the process itself.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "base/settings.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/run/history.hpp"
#include "harness/run/launcher.hpp"
#include "harness/run/supervisor.hpp"
#include "harness/scenario/loader.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {

FAULTLINE_SETTING(kCgroupRoot, std::string, "FAULTLINE_CGROUP_ROOT", "/sys/fs/cgroup/memory",
                  "cgroup v1 memory hierarchy where memory_limit faults create their groups");

FAULTLINE_SETTING(kArenaDir, std::string, "FAULTLINE_ARENA_DIR", "/dev/shm",
                  "tmpfs directory where memory_limit faults with device_arena create the file "
                  "backing the rank's device memory");

namespace {

// Removes the arena files left by harnesses that are gone (named like their cgroups,
// faultline.<harness pid>.*.arena).
void sweep_stale_arenas() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kArenaDir.get(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("faultline.", 0) != 0 || e.path().extension() != ".arena") continue;
    const pid_t owner = std::atoi(name.c_str() + 10);
    if (owner > 0 && (::kill(owner, 0) == 0 || errno == EPERM)) continue;  // its harness lives
    std::filesystem::remove(e.path(), ec);
  }
}

class MemoryLimitFault : public FaultOf<MemoryLimitFault> {
 public:
  int64_t bytes = 0;
  int64_t arena_bytes = 0;  // device_arena: 0 = none
  std::optional<Cgroup> group;
  std::string arena;  // the tmpfs file backing the rank's device memory

  nlohmann::json params() const override {
    return {{"bytes", bytes}, {"device_arena", arena_bytes}};
  }

  // /dev/shm/<group name>.arena, its pages allocated by the harness (charged to its cgroup).
  void make_arena(Host& h) {
    sweep_stale_arenas();
    arena =
        kArenaDir.get() + "/" + std::filesystem::path(group->path()).filename().string() + ".arena";
    const int fd = ::open(arena.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      const std::string why = std::strerror(errno);
      arena.clear();
      raise("memory_limit device_arena: cannot create {}: {}", arena, why);
    }
    const int err = ::posix_fallocate(fd, 0, arena_bytes);
    ::close(fd);
    if (err != 0) {
      ::unlink(arena.c_str());
      raise("memory_limit device_arena: cannot allocate {} bytes of {}: {}", arena_bytes, arena,
            std::strerror(err));
    }
    h.record("device_arena", {{"bytes", arena_bytes}, {"file", arena}}, rank,
             fmt::format("rank {} device memory: {} bytes of {}, charged to the harness", rank,
                         arena_bytes, arena));
  }

  void setup(Host& h) override {
    if (const int n = sweep_stale_cgroups(kCgroupRoot.get()); n > 0) {
      h.hist.harness("cleanup", {{"stale_cgroups_removed", n}});
    }
    group.emplace(kCgroupRoot.get(), "FAULTLINE_CGROUP_ROOT", h.dir, rank, "memory_limit");
    group->write("memory.limit_in_bytes", std::to_string(bytes));
    // Without swap accounting the rank would swap instead of being killed.
    if (std::filesystem::exists(group->path() + "/memory.memsw.limit_in_bytes")) {
      group->write("memory.memsw.limit_in_bytes", std::to_string(bytes));
    }
    group->write("memory.swappiness", "0");
    if (arena_bytes > 0) make_arena(h);
    h.record("memory_limit", {{"bytes", bytes}, {"cgroup", group->path()}}, rank,
             fmt::format("rank {} limited to {} bytes (cgroup)", rank, bytes));
  }

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && group) l.spec.cgroup_procs.push_back(group->procs());
    if (r == rank && !arena.empty()) l.env["FAULTLINE_DEVICE_ARENA"] = arena;
  }

  // What the kernel says about the rank: its peak, failures to charge, OOM kills.
  void on_rank_exit(Host& h, int r) override {
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

  void heal(Host& h, bool processes_gone) override {
    if (!arena.empty() && processes_gone) {
      ::unlink(arena.c_str());  // the rank's mapping, if any, keeps its pages until it exits
      arena.clear();
    }
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
    if (!launcher_has_rank_processes(c.s.launcher)) {
      loader::fail_at(
          c.file, item, c.at + ".memory_limit",
          "a per-rank memory limit needs topology.launcher: " + rank_process_launchers());
    }
    return f;
  }
};

}  // namespace

const FaultKind& memory_limit_kind() {
  static const MemoryLimitKind k;
  return k;
}

}  // namespace fl::harness::faults
