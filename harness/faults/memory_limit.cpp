// memory_limit: a rank runs in its own cgroup (v1 memory controller) with a hard limit and no
// swap: past it the kernel's OOM killer ends the rank, as on a node whose memory runs out.
#include <cstdlib>
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

namespace {

class MemoryLimitFault : public FaultOf<MemoryLimitFault> {
 public:
  int64_t bytes = 0;
  std::optional<Cgroup> group;

  nlohmann::json params() const override { return {{"bytes", bytes}}; }

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
    h.record("memory_limit", {{"bytes", bytes}, {"cgroup", group->path()}}, rank,
             fmt::format("rank {} limited to {} bytes (cgroup)", rank, bytes));
  }

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && group) l.spec.cgroup_procs.push_back(group->procs());
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
             "Memory limit of `rank` (cgroup; k, m, g suffixes): the kernel OOM killer ends it"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<MemoryLimitFault>();
    f->bytes = loader::parse_size(c.file, item["memory_limit"], c.at + ".memory_limit");
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
