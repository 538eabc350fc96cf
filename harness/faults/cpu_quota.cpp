// cpu_quota: from a step on, a rank gets only a fraction of one CPU (cgroup v1 CFS bandwidth:
// cpu.cfs_quota_us over cpu.cfs_period_us), as on a node shared with a noisy neighbour or a
// container with a small CPU limit. The kernel throttles the rank; its peers wait for it in the
// next collective: a straggler made by the scheduler, not by the code. With topology.hosts the
// agent of the rank's host makes the group there, moves the rank in, sets and lifts the quota
// (CpuQuota, CpuRelease below).
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

FAULTLINE_SETTING(kCpuCgroupRoot, std::string, "FAULTLINE_CPU_CGROUP_ROOT", "/sys/fs/cgroup/cpu",
                  "cgroup v1 cpu hierarchy where cpu_quota faults create their groups");

std::string cpu_cgroup_root() {
  return kCpuCgroupRoot.get();
}

namespace {

namespace pb = faultline::v1;

constexpr int64_t kPeriodUs = 100'000;  // the kernel's default CFS period

// On a node: each rank's cpu cgroup made there, its processes moved in as they appear.
struct CpuGroups : NodeState {
  Node& n;
  std::map<int, std::unique_ptr<RankCgroup>> groups;  // by rank
  explicit CpuGroups(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
};

nlohmann::json cpu_quota_on_node(Node& n, const pb::CpuQuota& r) {
  const int rank = r.rank();
  if (rank < 0) raise<Error>("cpu_quota: rank {} is not a rank (0 or more)", rank);
  if (r.period_us() < 1000 || r.period_us() > 1000000) {
    raise<Error>("cpu_quota: period {} us is not within 1000-1000000 (the kernel's range)",
                 r.period_us());
  }
  if (r.quota_us() != -1 && r.quota_us() < 1000) {
    raise<Error>("cpu_quota: quota {} us is below 1000 (the kernel's least; -1: no limit)",
                 r.quota_us());
  }
  auto& groups = n.state<CpuGroups>().groups;
  auto it = groups.find(rank);
  if (it == groups.end()) {
    // The first request makes the group and starts moving the rank's processes into it.
    auto g = RankCgroup::make("cpu", rank, n.run_dir(), n.secret(), n.host(),
                              [&](Cgroup& cg) { set_cpu_quota(cg, r.quota_us(), r.period_us()); });
    g->start();
    it = groups.emplace(rank, std::move(g)).first;
  } else {
    set_cpu_quota(*it->second->cg, r.quota_us(), r.period_us());
  }
  auto d = it->second->counters();
  d.update({{"quota_us", r.quota_us()}, {"period_us", r.period_us()}, {"host", n.host()}});
  return d;
}

nlohmann::json cpu_release(Node& n, const pb::CpuRelease& r) {
  auto& groups = n.state<CpuGroups>().groups;
  auto it = groups.find(r.rank());
  if (it == groups.end()) {
    raise<Error>(
        "cpu_release: rank {} has no cpu cgroup of this agent on {} (refused: the agent touches "
        "only the groups it made)",
        r.rank(), n.host());
  }
  auto d = it->second->release();
  groups.erase(it);
  d["host"] = n.host();
  return d;
}

std::vector<std::string> CpuGroups::cleanup() {
  std::vector<std::string> lines;
  while (!groups.empty()) {
    pb::CpuRelease release;
    release.set_rank(groups.begin()->first);
    try {
      lines.push_back("cpu_release " + cpu_release(n, release).dump());
    } catch (const std::exception& e) {
      groups.erase(release.rank());
      lines.push_back(e.what());
    }
  }
  return lines;
}

std::vector<std::string> sweep_cpu_groups() {
  const int n = sweep_stale_cgroups(cpu_cgroup_root());
  if (n <= 0) return {};
  return {fmt::format("removed {} cgroup(s) of agents or harnesses that are gone from {}", n,
                      cpu_cgroup_root())};
}

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
        group_path = quota_on(h, n, -1).value("cgroup", "");
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
  nlohmann::json quota_on(Host& h, int n, int64_t quota) {
    pb::CpuQuota req;
    req.set_rank(rank);
    req.set_quota_us(quota);
    req.set_period_us(kPeriodUs);
    return faults::on_node(h, n, req, fmt::format("cpu_quota on rank {}", rank));
  }
  // The quota set by each agent holding a group: the last one's report.
  nlohmann::json on_host(Host& h, int64_t quota) {
    nlohmann::json r;
    for (const int n : nodes) r = quota_on(h, n, quota);
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
    pb::CpuRelease release;
    release.set_rank(rank);
    release_group(h, node, rank, "cpu_quota", release, group_path,
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
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::CpuQuota> quota(&cpu_quota_on_node, &sweep_cpu_groups);
    static const NodeHandlerOf<pb::CpuRelease> release(&cpu_release);
    return {&quota, &release};
  }
};

}  // namespace

const FaultKind& cpu_quota_kind() {
  static const CpuQuotaKind k;
  return k;
}

}  // namespace fl::harness::faults
