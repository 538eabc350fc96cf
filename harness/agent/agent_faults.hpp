// The host faults a per-host agent applies itself (docs/cluster.md): a memory limit on the run's
// ranks on this host (a cgroup v1 memory group the agent creates, fills with the rank's processes
// as they appear, reads and removes), a full disk (a sized tmpfs the agent mounts on a directory of
// the run and unmounts), and damaged files of the run directory (kept and put back). Each request
// is typed (HostFault in faultline.proto), never a command line; every path is derived from the
// run directory, and the agent acts only on the cgroups, mounts and backups it made itself.
// It also puts a rank in a cpu cgroup with a CFS quota (cpu_quota), gives the ranks of its host a
// /dev/shm of a set size in a mount namespace it holds (shm), and leaves a library out of a rank's
// plugin directory (hide): agent_faults_more.cpp.
// Whatever is still in place when the agent stops or loses the harness is undone by cleanup().
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace faultline::v1 {
class HostFault;
}

namespace fl::harness {

namespace faults {
struct HostFaultOp;
}
struct RankCgroup;

// The typed request for `op` (what the hub sends); Error for an op that is not one of them.
faultline::v1::HostFault host_fault_request(const faults::HostFaultOp& op);

class AgentFaults {
 public:
  // `secret`: the run's, which the ranks' environments carry (how a rank's process is known).
  AgentFaults(std::string run_dir, std::string host, std::string secret);
  ~AgentFaults();  // cleanup()

  // Applies one request: the JSON report of what was done; Error (naming what and why) when the
  // request is refused or fails.
  nlohmann::json apply(const faultline::v1::HostFault& f);
  // Undoes everything still in place, newest first: restores files, unmounts, releases cgroups.
  // One line per thing undone (or that could not be); never throws.
  std::vector<std::string> cleanup();
  // What agents (or harnesses) that died left on this host: memory cgroups named after a pid
  // that is gone, tmpfs mounts of a disk_full whose agent is gone. One line per thing removed.
  static std::vector<std::string> sweep_stale();

  // RUN_DIR/REL as an absolute path, or Error when REL is empty, absolute, has a `..` component,
  // or resolves (through links) outside the run directory; `what` names the request.
  static std::string run_path(const std::string& run_dir, const std::string& rel,
                              const std::string& what);
  // A file_damage tag: 1-32 letters or digits (it names a directory of backups); Error otherwise.
  static void check_tag(const std::string& tag);

  // With an shm_mount in place: the pid holding the mount namespace its ranks must enter.
  pid_t shm_holder() const { return shm_holder_; }

 private:
  nlohmann::json memory_limit(int rank, int64_t bytes);
  nlohmann::json memory_status(int rank);
  nlohmann::json memory_release(int rank);
  nlohmann::json disk_full(const std::string& rel, int64_t bytes);
  nlohmann::json disk_free(const std::string& rel);
  nlohmann::json file_damage(const std::string& glob, const std::string& action, int64_t bytes,
                             uint64_t seed, const std::string& tag);
  nlohmann::json file_restore(const std::string& tag);
  RankCgroup& group(int rank, const std::string& what);
  // agent_faults_more.cpp
  nlohmann::json cpu_quota(int rank, int64_t quota_us, int64_t period_us);
  nlohmann::json cpu_release(int rank);
  nlohmann::json shm_mount(int64_t bytes);
  nlohmann::json shm_release();
  nlohmann::json hide_plugin(int rank, const std::string& library);
  nlohmann::json unhide_plugin(int rank, const std::string& library);

  std::string dir_, host_, secret_;
  std::map<int, std::unique_ptr<RankCgroup>> groups_;          // memory, by rank
  std::map<int, std::unique_ptr<RankCgroup>> cpu_groups_;      // by rank
  pid_t shm_holder_ = 0;                                       // shm's mount namespace
  std::map<std::pair<int, std::string>, std::string> hidden_;  // (rank, library) -> its links
  std::map<std::string, std::string> mounts_;                  // rel -> absolute
  std::map<std::string, std::map<std::string, std::string>> backups_;  // tag -> file -> copy
};

}  // namespace fl::harness
