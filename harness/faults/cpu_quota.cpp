// cpu_quota: from a step on, a rank gets only a fraction of one CPU (cgroup v1 CFS bandwidth:
// cpu.cfs_quota_us over cpu.cfs_period_us), as on a node shared with a noisy neighbour or a
// container with a small CPU limit. The kernel throttles the rank; its peers wait for it in the
// next collective: a straggler made by the scheduler, not by the code. With topology.hosts the
// agent of the rank's host makes the group there, moves the rank in, sets and lifts the quota.
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/process/supervisor.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {

FAULTLINE_SETTING(kCpuCgroupRoot, std::string, "FAULTLINE_CPU_CGROUP_ROOT", "/sys/fs/cgroup/cpu",
                  "cgroup v1 cpu hierarchy where cpu_quota faults create their groups");

std::string cpu_cgroup_root() {
  return kCpuCgroupRoot.get();
}

namespace {

constexpr int64_t kPeriodUs = 100'000;  // the kernel's default CFS period

class CpuQuotaFault : public FaultOf<CpuQuotaFault> {
 public:
  double cpus = 0.25;  // the share of one CPU the rank may use
  std::optional<Cgroup> group;
  bool limited = false;

  // Through agents (agent_nodes.hpp; the *_on_host methods): those holding a group (the rank's
  // host; with launcher srun and no hosts every node's, and only the rank's node's has the rank)
  std::vector<int> nodes;
  bool released = false;
  bool applied = false;  // the quota was set once

  nlohmann::json params() const override { return {{"cpus", cpus}}; }
  bool timed() const override { return true; }

  // The group exists from launch, unlimited, so that the rank is in it when the limit comes.
  void setup(Host& h) override {
    if (const auto want = fault_nodes(h, rank); !want.empty()) {
      // Each node counts once its agent made the group: a later agent's failure leaves the
      // groups made so far for heal to remove.
      for (const int n : want) {
        group_path = on_node(h, n, -1).value("cgroup", "");
        nodes.push_back(n);
      }
      return;
    }
    if (const int n = sweep_stale_cgroups(kCpuCgroupRoot.get()); n > 0) {
      h.hist.harness("cleanup", {{"stale_cgroups_removed", n}});
    }
    group.emplace(kCpuCgroupRoot.get(), "FAULTLINE_CPU_CGROUP_ROOT", h.dir, rank, "cpu_quota");
    set_cpu_quota(*group, -1, kPeriodUs);
    group_path = group->path();
  }

  // The quota (-1: none) set by agent `n` (it makes the group first time): its report.
  nlohmann::json on_node(Host& h, int n, int64_t quota) {
    auto& a = agent_for(h, n, fmt::format("cpu_quota on rank {}", rank));
    HostFaultOp op{"cpu_quota", rank};
    op.quota_us = quota;
    op.period_us = kPeriodUs;
    return a.host_fault(n, op);
  }
  // The quota set by each agent holding a group: the last one's report.
  nlohmann::json on_host(Host& h, int64_t quota) {
    nlohmann::json r;
    for (const int n : nodes) r = on_node(h, n, quota);
    return r;
  }
  // Where the group is, in events: the rank's host or node (every node Slurm could pick).
  std::string hosts_text(const Host& h) const {
    std::vector<std::string> names;
    for (const int n : nodes) names.push_back(node_name(h, n));
    return fmt::format("{}", fmt::join(names, ","));
  }

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && group) l.spec.cgroup_procs.push_back(group->procs());
  }

  bool inject(Host& h, const Progress* p, When now) override {
    const auto quota = static_cast<int64_t>(cpus * kPeriodUs);
    nlohmann::json d = {{"cpus", cpus},         {"quota_us", quota}, {"period_us", kPeriodUs},
                        {"cgroup", group_path}, {"at_step", -1},     {"when", when_name(now)}};
    std::string where = "cgroup";
    if (!nodes.empty()) {
      const auto r = on_host(h, quota);
      const std::string host = hosts_text(h);
      d.update({{"via", "agent"}, {"host", host}, {"agent", r}});
      where = "cgroup on " + host + ", by its agent";
    } else {
      set_cpu_quota(*group, quota, kPeriodUs);
      d["via"] = "local";
    }
    limited = applied = true;
    const int64_t at_step = p && p->max_step.count(rank) ? p->max_step.at(rank) : -1;
    d["at_step"] = at_step;
    h.record(
        "cpu_quota", d, rank,
        fmt::format("rank {} limited to {:.2f} CPU from step {} ({})", rank, cpus, at_step, where));
    return true;
  }

  // How much the kernel throttled the rank (cpu.stat), then the group goes. On a host the agent
  // reports it when it removes the group.
  void on_rank_exit(Host& h, int r) override {
    if (r != rank || !group || !limited) return;
    auto stat = cpu_stat(*group);
    stat["via"] = "local";
    h.hist.harness("cgroup_cpu", stat, rank);
  }

  void heal(Host& h, bool processes_gone) override {
    if (!nodes.empty()) return heal_on_host(h);
    if (!group) return;
    try {
      if (limited && !processes_gone) {
        set_cpu_quota(*group, -1, kPeriodUs);
        limited = false;
        h.hist.harness("fault_healed",
                       {{"fault", "cpu_quota"}, {"cgroup", group->path()}, {"via", "local"}}, rank);
      }
      if (processes_gone && !group->removed()) {
        const bool gone = group->remove();
        h.hist.harness("fault_healed",
                       {{"fault", "cpu_quota"},
                        {"cgroup", group->path()},
                        {"removed", gone},
                        {"via", "local"}},
                       rank);
      }
    } catch (...) {
    }
  }

  // While the agent is up (the harness heals before it stops the agents): it reports cpu.stat,
  // moves what is left of the rank back and removes the group. A lost agent cannot; the next one
  // on that host sweeps the group.
  void heal_on_host(Host& h) {
    if (released || nodes.empty()) return;
    released = true;
    for (const int n : nodes) heal_on(h, n);
  }

  void heal_on(Host& h, int node) {
    release_group(h, node, rank, "cpu_quota", "cpu_release", group_path,
                  [&](const nlohmann::json& r, nlohmann::json&) {
                    // With Slurm's placement only the rank's node's group held the rank.
                    const auto pids = r.value("pids", nlohmann::json::array());
                    if (!applied || (nodes.size() != 1 && pids.empty())) return;
                    h.hist.harness("cgroup_cpu",
                                   {{"nr_periods", r.value("nr_periods", int64_t{-1})},
                                    {"nr_throttled", r.value("nr_throttled", int64_t{-1})},
                                    {"throttled_ns", r.value("throttled_ns", int64_t{-1})},
                                    {"pids", pids},
                                    {"via", "agent"},
                                    {"host", node_name(h, node)}},
                                   rank);
                  });
  }

 private:
  std::string group_path;
};

class CpuQuotaKind : public FaultKind {
 public:
  std::string key() const override { return "cpu_quota"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].cpu_quota",
             KeyType::kFloat,
             "",
             "CPUs `rank` may use from `step` on (cgroup CFS quota; 0.25: a quarter of one CPU): "
             "the kernel throttles it",
             {},
             0.01,
             64}};
  }
  std::vector<When> allowed_at() const override { return {When::kLaunch, When::kStep}; }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<CpuQuotaFault>();
    f->cpus = item["cpu_quota"].as<double>();
    if (!item["rank"] || item["rank"].as<int>() < 0) {
      loader::fail_at(c.file, item, c.at + ".rank", "a CPU quota needs a rank (0 or more)");
    }
    if (!c.rank_processes(c.s.topo.launcher) && c.s.topo.hosts.empty() &&
        !slurm_places_ranks(c.s)) {
      loader::fail_at(
          c.file, item, c.at + ".cpu_quota",
          "a per-rank CPU quota needs topology.launcher: " + c.rank_process_launchers() +
              ", topology.hosts or launcher srun (the agent of the rank's host or "
              "node applies it)");
    }
    return f;
  }
};

}  // namespace

const FaultKind& cpu_quota_kind() {
  static const CpuQuotaKind k;
  return k;
}

}  // namespace fl::harness::faults
