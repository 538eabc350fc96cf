// One rank's cgroup on a node (a memory_limit's or a cpu_quota's), made by the node's handler on
// this machine and on an agent's host alike, and how the rank gets into it (place()). On this
// machine the harness starts the rank, which joins the group before exec (Node::place_at_spawn).
// On an agent's host the rank starts after the group is made, through mpirun's daemon or srun, so
// nobody else can put it there: a watcher moves the rank's processes in as soon as they exist. A
// process is the rank's when it works in the rank's directory with RANK=rank and the run's secret
// (or none). Released, the group gives its processes back to the groups they came from and is
// removed.
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
#include "harness/faults/on_nodes.hpp"

namespace fl::harness::faults {

struct RankCgroup {
  std::string controller;  // "memory" or "cpu": its v1 hierarchy, or the v2 one, at `root`
  int rank = 0;
  int64_t bytes = 0;  // memory: the limit
  std::string root, rank_dir, secret;
  Node* node = nullptr;   // whose group it is
  int swept = 0;          // stale groups of gone owners removed before it was made
  bool at_spawn = false;  // the rank joins at spawn (this machine), not moved in by the watcher
  std::string origin;     // at spawn: the group the rank would have been in (the harness's)
  std::optional<Cgroup> cg;
  std::mutex mu;
  std::map<pid_t, std::string> adopted;  // pid -> the cgroup (of `controller`) it came from
  std::vector<double> adopted_ms;        // how long after its start each was moved in
  std::vector<std::string> errors;
  std::atomic<bool> stop{false};
  std::thread watcher;

  // A new group of `controller` ("memory" or "cpu", under that fault's cgroup root, stale groups
  // of gone harnesses and agents swept first: `swept`) for `rank` of the run of node `n`, limited
  // by `limit` (the group removed again if that throws); the rank not placed yet.
  static std::unique_ptr<RankCgroup> make(const std::string& controller, int rank, Node& n,
                                          const std::function<void(Cgroup&)>& limit);

  // The rank's processes join the group from now on: at spawn where the node starts them, else
  // through the watcher (start()).
  void place();
  // Is `pid` a process of rank `rank` of this run?
  bool is_rank(pid_t pid) const;
  // Moves the rank's processes not moved yet; true once any was.
  bool adopt_new();
  void start();  // the watcher
  // The kernel's counters for the group (memory: usage, peak, failcnt, OOM kills; cpu: cpu.stat)
  // with how the rank is placed ("at_spawn" or "moved_in"), the pids moved in (none at spawn),
  // which of them are still the rank's, and the errors met.
  nlohmann::json counters();
  // Stops watching, moves what is left back where it came from, removes the group.
  nlohmann::json release();
  ~RankCgroup();
};

}  // namespace fl::harness::faults
