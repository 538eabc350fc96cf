// One rank's cgroup on a node (a memory_limit's or a cpu_quota's), and the watcher that moves the
// rank's processes into it as soon as they exist: the rank starts after the group is made, through
// mpirun's daemon on that host, so nobody else can put it there. A process is the rank's when it
// works in the rank's directory with RANK=rank and the run's secret (or none). Released, the group
// gives its processes back to the groups they came from and is removed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/faults/cgroup.hpp"

namespace fl::harness::faults {

struct RankCgroup {
  std::string controller;  // "memory" or "cpu": the v1 hierarchy under `root`
  int rank = 0;
  int64_t bytes = 0;  // memory: the limit
  std::string root, rank_dir, secret;
  std::optional<Cgroup> cg;
  std::mutex mu;
  std::map<pid_t, std::string> adopted;  // pid -> the cgroup (of `controller`) it came from
  std::vector<double> adopted_ms;        // how long after its start each was moved in
  std::vector<std::string> errors;
  std::atomic<bool> stop{false};
  std::thread watcher;

  // A new group of `controller` ("memory" or "cpu", under that fault's cgroup root, stale groups
  // of gone harnesses swept first) for `rank` of the run in `run_dir` on `host`, limited by
  // `limit` (the group removed again if that throws); its watcher not started yet.
  static std::unique_ptr<RankCgroup> make(const std::string& controller, int rank,
                                          const std::string& run_dir, const std::string& secret,
                                          const std::string& host,
                                          const std::function<void(Cgroup&)>& limit);

  // Is `pid` a process of rank `rank` of this run?
  bool is_rank(pid_t pid) const;
  // Moves the rank's processes not moved yet; true once any was.
  bool adopt_new();
  void start();  // the watcher
  // The kernel's counters for the group (memory: usage, peak, failcnt, OOM kills; cpu: cpu.stat)
  // with the pids moved in, which of them are still the rank's, and the errors met.
  nlohmann::json counters();
  // Stops watching, moves what is left back where it came from, removes the group.
  nlohmann::json release();
  ~RankCgroup();
};

}  // namespace fl::harness::faults
