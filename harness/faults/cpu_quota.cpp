// cpu_quota: from a step on, a rank gets only a fraction of one CPU (cgroup v1 CFS bandwidth:
// cpu.cfs_quota_us over cpu.cfs_period_us), as on a node shared with a noisy neighbour or a
// container with a small CPU limit. The kernel throttles the rank; its peers wait for it in the
// next collective: a straggler made by the scheduler, not by the code.
#include <cstring>
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

FAULTLINE_SETTING(kCpuCgroupRoot, std::string, "FAULTLINE_CPU_CGROUP_ROOT", "/sys/fs/cgroup/cpu",
                  "cgroup v1 cpu hierarchy where cpu_quota faults create their groups");

namespace {

constexpr int64_t kPeriodUs = 100'000;  // the kernel's default CFS period

class CpuQuotaFault : public FaultOf<CpuQuotaFault> {
 public:
  double cpus = 0.25;  // the share of one CPU the rank may use
  std::optional<Cgroup> group;
  bool limited = false;

  nlohmann::json params() const override { return {{"cpus", cpus}}; }
  bool timed() const override { return true; }

  // The group exists from launch, unlimited, so that the rank is in it when the limit comes.
  void setup(Host& h) override {
    if (const int n = sweep_stale_cgroups(kCpuCgroupRoot.get()); n > 0) {
      h.hist.harness("cleanup", {{"stale_cgroups_removed", n}});
    }
    group.emplace(kCpuCgroupRoot.get(), "FAULTLINE_CPU_CGROUP_ROOT", h.dir, rank, "cpu_quota");
    group->write("cpu.cfs_period_us", std::to_string(kPeriodUs));
    group->write("cpu.cfs_quota_us", "-1");
  }

  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (r == rank && group) l.spec.cgroup_procs.push_back(group->procs());
  }

  bool inject(Host& h, const Progress* p, When now) override {
    const auto quota = static_cast<int64_t>(cpus * kPeriodUs);
    group->write("cpu.cfs_quota_us", std::to_string(quota));
    limited = true;
    const int64_t at_step = p && p->max_step.count(rank) ? p->max_step.at(rank) : -1;
    h.record("cpu_quota",
             {{"cpus", cpus},
              {"quota_us", quota},
              {"period_us", kPeriodUs},
              {"cgroup", group->path()},
              {"at_step", at_step},
              {"when", when_name(now)}},
             rank, fmt::format("rank {} limited to {:.2f} CPU from step {}", rank, cpus, at_step));
    return true;
  }

  // How much the kernel throttled the rank (cpu.stat), then the group goes.
  void on_rank_exit(Host& h, int r) override {
    if (r != rank || !group || !limited) return;
    const std::string stat = group->read("cpu.stat");
    auto field = [&](const char* name) -> int64_t {
      const auto p = stat.find(std::string(name) + " ");
      return p == std::string::npos ? -1 : std::atoll(stat.c_str() + p + std::strlen(name) + 1);
    };
    h.hist.harness("cgroup_cpu",
                   {{"nr_periods", field("nr_periods")},
                    {"nr_throttled", field("nr_throttled")},
                    {"throttled_ns", field("throttled_time")}},
                   rank);
  }

  void heal(Host& h, bool processes_gone) override {
    if (!group) return;
    try {
      if (limited && !processes_gone) {
        group->write("cpu.cfs_quota_us", "-1");
        limited = false;
        h.hist.harness("fault_healed", {{"fault", "cpu_quota"}, {"cgroup", group->path()}}, rank);
      }
      if (processes_gone && !group->removed()) {
        const bool gone = group->remove();
        h.hist.harness("fault_healed",
                       {{"fault", "cpu_quota"}, {"cgroup", group->path()}, {"removed", gone}},
                       rank);
      }
    } catch (...) {
    }
  }
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
    if (!launcher_has_rank_processes(c.s.launcher)) {
      loader::fail_at(c.file, item, c.at + ".cpu_quota",
                      "a per-rank CPU quota needs topology.launcher: " + rank_process_launchers());
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
