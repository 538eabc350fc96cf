// cgroup groups for one rank: created under a controller's hierarchy (memory, cpu), named
// after the harness's pid and start time so that a later run, or `faultline clean`, can remove
// the groups of a harness that is gone (cgroups outlive their processes; a SIGKILLed harness
// removes nothing) and never those of one that lives, even after its pid was reused.
// Both interfaces: cgroup v1 (one hierarchy per controller: memory.limit_in_bytes,
// cpu.cfs_quota_us) and v2 (the unified hierarchy: memory.max, cpu.max, memory.events), told
// apart by the root's filesystem; the groups, cgroup.procs and the removal are the same.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness::faults {

enum class CgroupVersion { kV1, kV2 };

// The interface `root` speaks: v2 on a cgroup2 filesystem, v1 on a cgroup (v1) one; a directory
// on neither (a test's fake tree) is v2 when it has cgroup.controllers, else v1; so is a root that
// does not exist (v1: its error then names the v1 hierarchy as before).
CgroupVersion cgroup_version(const std::string& root);

// Where `controller` ("memory" or "cpu") makes its groups when its setting says `auto`: the v1
// hierarchy /sys/fs/cgroup/CONTROLLER when the host mounts one, else the unified hierarchy
// (/sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a hybrid one when it offers the
// controller), else the v1 path (whose absence the error then names).
std::string auto_cgroup_root(const std::string& controller,
                             const std::string& base = "/sys/fs/cgroup");

class Cgroup {
 public:
  // Creates ROOT/faultline.<harness pid>-<its start time>.<run>.rank<R>; Error (naming `what`, the
  // root, and the setting that moves it) when the hierarchy is not writable, or (v2) cannot give
  // its groups `controller` ("" for none).
  Cgroup(const std::string& root, const std::string& setting, const std::string& run_dir, int rank,
         const std::string& what, const std::string& controller = "");
  const std::string& path() const { return path_; }
  CgroupVersion version() const { return version_; }
  bool v2() const { return version_ == CgroupVersion::kV2; }
  std::string procs() const { return path_ + "/cgroup.procs"; }
  void write(const std::string& file, const std::string& value) const;
  std::string read(const std::string& file) const;  // "" when unreadable
  // Waits briefly for the group to empty, removes it; true when it is gone.
  bool remove();
  bool removed() const { return removed_; }

 private:
  std::string path_;
  CgroupVersion version_ = CgroupVersion::kV1;
  bool removed_ = false;
};

// Error (naming `what`, the root, and the setting that moves it) unless a group can be made under
// `root` and, on v2, be given `controller` (in the root's cgroup.subtree_control, which is tried
// when cgroup.controllers offers it): what Cgroup's constructor checks first, and `validate`
// before a run (runner.cpp).
void check_cgroup_root(const std::string& root, const std::string& setting, const std::string& what,
                       const std::string& controller = "");

// The hierarchy memory_limit uses (FAULTLINE_CGROUP_ROOT, `auto` by default; memory_limit.cpp).
std::string memory_cgroup_root();

// The hierarchy cpu_quota uses (FAULTLINE_CPU_CGROUP_ROOT, `auto` by default; cpu_quota.cpp).
std::string cpu_cgroup_root();

// What a fault does to its group, the same on the harness's machine and in a host's agent:
// a hard memory limit without swap (memory_limit), a CFS quota of `quota_us` per `period_us`
// (cpu_quota; quota -1 lifts it), and the kernel's account of the throttling (cpu.stat:
// nr_periods, nr_throttled, throttled_ns; -1 for a field it lacks).
void limit_memory(const Cgroup& g, int64_t bytes);
void set_cpu_quota(const Cgroup& g, int64_t quota_us, int64_t period_us);
nlohmann::json cpu_stat(const Cgroup& g);
// The memory group's counters: usage, max_usage (v2: memory.peak, -1 without it), failcnt (v2:
// memory.events' max), oom_kills, under_oom (v2: 0, it has no such state) and cgroup_version.
nlohmann::json memory_counters(const Cgroup& g);

// The files' formats. cpu.max's line for a quota (-1: "max") per period; the value of `key` in
// a flat keyed file (cpu.stat, memory.events, memory.oom_control: "key value" lines), -1 when
// it has none.
std::string cpu_max_line(int64_t quota_us, int64_t period_us);
int64_t keyed_value(const std::string& text, const std::string& key);

// The cgroup of `pid` in `version`'s hierarchy of `controller` (v1), relative to its root: the
// path /proc/PID/cgroup names ("" when unknown).
std::string cgroup_of(pid_t pid, const std::string& controller, CgroupVersion version);

// The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22); 0 if unknown.
uint64_t process_start_ticks(pid_t pid);
// "faultline.<pid>-<start ticks>" of this process: the prefix of every name it gives to what
// it leaves outside the run directory (cgroups).
std::string owner_tag();
// Is the owner named in `name` ("faultline.<pid>-<start>..." or an older
// "faultline.<pid>....") still running? Names that are not faultline's count as alive.
bool owner_alive(const std::string& name);

// The groups under `root` left by harnesses that are gone (paths).
std::vector<std::string> stale_cgroups(const std::string& root);
// Kills what is left in such a group and removes it: "" when it is gone, else why not.
std::string remove_stale_cgroup(const std::string& path);
// Removes the groups under `root` left by harnesses that are gone; returns how many.
int sweep_stale_cgroups(const std::string& root);

}  // namespace fl::harness::faults
