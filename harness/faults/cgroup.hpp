// cgroup v1 groups for one rank: created under a controller's hierarchy (memory, cpu), named
// after the harness's pid and start time so that a later run, or `faultline clean`, can remove
// the groups of a harness that is gone (cgroups outlive their processes; a SIGKILLed harness
// removes nothing) and never those of one that lives, even after its pid was reused.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness::faults {

class Cgroup {
 public:
  // Creates ROOT/faultline.<harness pid>-<its start time>.<run>.rank<R>; Error (naming `what`, the
  // root, and the setting that moves it) when the hierarchy is not writable.
  Cgroup(const std::string& root, const std::string& setting, const std::string& run_dir, int rank,
         const std::string& what);
  const std::string& path() const { return path_; }
  std::string procs() const { return path_ + "/cgroup.procs"; }
  void write(const std::string& file, const std::string& value) const;
  std::string read(const std::string& file) const;  // "" when unreadable
  // Waits briefly for the group to empty, removes it; true when it is gone.
  bool remove();
  bool removed() const { return removed_; }

 private:
  std::string path_;
  bool removed_ = false;
};

// Error (naming `what`, the root, and the setting that moves it) unless a group can be made under
// `root`: what Cgroup's constructor checks first, and `validate` before a run (runner.cpp).
void check_cgroup_root(const std::string& root, const std::string& setting,
                       const std::string& what);

// The cgroup v1 memory hierarchy memory_limit uses (FAULTLINE_CGROUP_ROOT; memory_limit.cpp).
std::string memory_cgroup_root();

// The cgroup v1 cpu hierarchy cpu_quota uses (FAULTLINE_CPU_CGROUP_ROOT; cpu_quota.cpp).
std::string cpu_cgroup_root();

// What a fault does to its group, the same on the harness's machine and in a host's agent:
// a hard memory limit without swap (memory_limit), a CFS quota of `quota_us` per `period_us`
// (cpu_quota; quota -1 lifts it), and the kernel's account of the throttling (cpu.stat:
// nr_periods, nr_throttled, throttled_ns; -1 for a field it lacks).
void limit_memory(const Cgroup& g, int64_t bytes);
void set_cpu_quota(const Cgroup& g, int64_t quota_us, int64_t period_us);
nlohmann::json cpu_stat(const Cgroup& g);

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
