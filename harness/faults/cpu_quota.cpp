// cpu_quota: from a step on, a rank gets only a fraction of one CPU (CFS bandwidth: cgroup v1's
// cpu.cfs_quota_us over cpu.cfs_period_us, or v2's cpu.max), as on a node shared with a noisy
// neighbour or a container with a small CPU limit. The kernel throttles the rank; its peers wait
// for it in the next collective: a straggler made by the scheduler, not by the code. The node of
// the rank's host (this machine's in-process node, or the agent of the rank's host) makes the
// group, places the rank in it, sets and lifts the quota (CpuQuota, CpuRelease below).
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

FAULTLINE_SETTING(kCpuCgroupRoot, std::string, "FAULTLINE_CPU_CGROUP_ROOT", "auto",
                  "cgroup hierarchy (v1 cpu or v2) where cpu_quota faults create their groups; "
                  "auto: /sys/fs/cgroup/cpu if the host mounts cgroup v1's, else the v2 hierarchy");

std::string cpu_cgroup_root() {
  const std::string root = kCpuCgroupRoot.get();
  return root == "auto" ? auto_cgroup_root("cpu") : root;
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
    auto g = RankCgroup::make("cpu", rank, n,
                              [&](Cgroup& cg) { set_cpu_quota(cg, r.quota_us(), r.period_us()); });
    g->place();
    it = groups.emplace(rank, std::move(g)).first;
  } else {
    set_cpu_quota(*it->second->cg, r.quota_us(), r.period_us());
  }
  auto d = it->second->counters();
  d.update({{"quota_us", r.quota_us()},
            {"period_us", r.period_us()},
            {"host", n.host()},
            {"stale_cgroups_removed", it->second->swept}});
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
  // The nodes holding a group (nodes_of: this machine's in-process node, the rank's host's agent,
  // or with launcher srun and no hosts every node's agent, and only the rank's node's has the rank)
  std::vector<int> nodes;
  bool released = false;
  bool applied = false;  // the quota was set once

  nlohmann::json params() const override { return {{"cpus", cpus}}; }
  bool timed() const override { return true; }

  // The group exists from launch, unlimited, so that the rank is in it when the limit comes. Each
  // node counts once it made the group: a later node's failure leaves the groups made so far for
  // heal to remove.
  void setup(Host& h) override {
    for (const int n : nodes_of(h, rank)) {
      const auto r = quota_on(h, n, -1);
      group_path = r.value("cgroup", "");
      nodes.push_back(n);
      note_swept(h, n, r);
    }
  }

  // The quota (-1: none) set by node `n` (it makes the group first time): its report.
  nlohmann::json quota_on(Host& h, int n, int64_t quota) {
    pb::CpuQuota req;
    req.set_rank(rank);
    req.set_quota_us(quota);
    req.set_period_us(kPeriodUs);
    return faults::on_node(h, n, req, fmt::format("cpu_quota on rank {}", rank));
  }
  // Where the groups are, in events: the rank's host or node (with Slurm's placement, every node).
  std::string hosts_text(const Host& h) const {
    std::vector<std::string> names;
    for (const int n : nodes) names.push_back(node_name(h, n));
    return fmt::format("{}", fmt::join(names, ","));
  }
  // The same in a summary line: "" on this machine (on_host), else " on HOST[,HOST...]".
  std::string on_hosts(const Host& h) const {
    std::string text = on_host(h, nodes.front());
    for (size_t i = 1; i < nodes.size(); ++i) text += "," + node_name(h, nodes[i]);
    return text;
  }

  bool inject(Host& h, const Progress* p, When now) override {
    if (nodes.empty()) raise<Error>("cpu_quota: rank {} has no group (its set-up failed)", rank);
    const auto quota = static_cast<int64_t>(cpus * kPeriodUs);
    nlohmann::json r;  // the quota set by every node holding a group: the last one's report
    for (const int n : nodes) r = quota_on(h, n, quota);
    applied = true;
    const int64_t at_step = p && p->max_step.count(rank) ? p->max_step.at(rank) : -1;
    nlohmann::json d = {{"cpus", cpus},         {"quota_us", quota},  {"period_us", kPeriodUs},
                        {"cgroup", group_path}, {"at_step", at_step}, {"when", when_name(now)}};
    d.update(where(h, nodes.front(), r));  // via, and the node's report as `agent`
    if (d.contains("host")) d["host"] = hosts_text(h);
    h.record("cpu_quota", d, rank,
             fmt::format("rank {} limited to {:.2f} CPU from step {} (cgroup{})", rank, cpus,
                         at_step, on_hosts(h)));
    return true;
  }

  // Each node reports cpu.stat (how much the kernel throttled the rank), moves what is left of the
  // rank back and removes the group; on an agent's host while the agent is up (the harness heals
  // before it stops the agents). A lost agent cannot; the next one on that host sweeps the group.
  void heal(Host& h, bool) override {
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
                    nlohmann::json stat = {{"nr_periods", r.value("nr_periods", int64_t{-1})},
                                           {"nr_throttled", r.value("nr_throttled", int64_t{-1})},
                                           {"throttled_ns", r.value("throttled_ns", int64_t{-1})},
                                           {"pids", pids},
                                           {"placed", r.value("placed", "")}};
                    stat.update(where(h, node));
                    h.hist.harness("cgroup_cpu", stat, rank);
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
