#include "harness/agent/agent_faults.hpp"

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/agent/rank_cgroup.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/file_ops.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/proto/faultline.pb.h"

namespace fl::harness {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

namespace {

constexpr const char* kDiskSource = "faultline-disk-full.";  // + the agent's pid

}  // namespace

pb::HostFault host_fault_request(const faults::HostFaultOp& op) {
  pb::HostFault f;
  if (op.op == "memory_limit") {
    f.mutable_memory_limit()->set_rank(op.rank);
    f.mutable_memory_limit()->set_bytes(op.bytes);
  } else if (op.op == "memory_status") {
    f.mutable_memory_status()->set_rank(op.rank);
  } else if (op.op == "memory_release") {
    f.mutable_memory_release()->set_rank(op.rank);
  } else if (op.op == "disk_full") {
    f.mutable_disk_full()->set_path(op.path);
    f.mutable_disk_full()->set_bytes(op.bytes);
  } else if (op.op == "disk_free") {
    f.mutable_disk_free()->set_path(op.path);
  } else if (op.op == "file_damage") {
    auto* d = f.mutable_file_damage();
    d->set_glob(op.path);
    d->set_action(op.action);
    d->set_bytes(op.bytes);
    d->set_seed(op.seed);
    d->set_tag(op.tag);
  } else if (op.op == "file_restore") {
    f.mutable_file_restore()->set_tag(op.tag);
  } else if (op.op == "cpu_quota") {
    f.mutable_cpu_quota()->set_rank(op.rank);
    f.mutable_cpu_quota()->set_quota_us(op.quota_us);
    f.mutable_cpu_quota()->set_period_us(op.period_us);
  } else if (op.op == "cpu_release") {
    f.mutable_cpu_release()->set_rank(op.rank);
  } else if (op.op == "shm_mount") {
    f.mutable_shm_mount()->set_bytes(op.bytes);
  } else if (op.op == "shm_release") {
    f.mutable_shm_release();
  } else if (op.op == "hide_plugin") {
    f.mutable_hide_plugin()->set_rank(op.rank);
    f.mutable_hide_plugin()->set_library(op.library);
  } else if (op.op == "unhide_plugin") {
    f.mutable_unhide_plugin()->set_rank(op.rank);
    f.mutable_unhide_plugin()->set_library(op.library);
  } else {
    raise<Error>("host fault '{}' is not one the agent knows", op.op);
  }
  return f;
}

AgentFaults::AgentFaults(std::string run_dir, std::string host, std::string secret)
    : dir_(std::move(run_dir)), host_(std::move(host)), secret_(std::move(secret)) {}

AgentFaults::~AgentFaults() {
  cleanup();
}

std::string AgentFaults::run_path(const std::string& run_dir, const std::string& rel,
                                  const std::string& what) {
  if (rel.empty()) raise<Error>("{}: an empty path (give one relative to the run directory)", what);
  const fs::path p(rel);
  if (p.is_absolute()) {
    raise<Error>("{}: '{}' is absolute; the agent acts only inside the run directory {}", what, rel,
                 run_dir);
  }
  for (const auto& part : p) {
    if (part == "..") {
      raise<Error>("{}: '{}' leaves the run directory {} ('..'); refused", what, rel, run_dir);
    }
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(run_dir, ec);
  const fs::path full = fs::weakly_canonical(base / p, ec);
  const std::string b = base.string() + "/", f = full.string();
  if (ec || f.size() <= b.size() || f.compare(0, b.size(), b) != 0) {
    raise<Error>("{}: '{}' resolves to {}, outside the run directory {}; refused", what, rel,
                 ec ? std::string("an unreadable path") : f, run_dir);
  }
  return f;
}

void AgentFaults::check_tag(const std::string& tag) {
  bool plain = !tag.empty() && tag.size() <= 32;
  for (char c : tag) plain &= std::isalnum(static_cast<unsigned char>(c)) != 0;
  if (!plain) {
    raise<Error>("file_damage: tag '{}' is not 1-32 letters or digits", tag);
  }
}

nlohmann::json AgentFaults::apply(const pb::HostFault& f) {
  switch (f.op_case()) {
    case pb::HostFault::kMemoryLimit:
      return memory_limit(f.memory_limit().rank(), f.memory_limit().bytes());
    case pb::HostFault::kMemoryStatus:
      return memory_status(f.memory_status().rank());
    case pb::HostFault::kMemoryRelease:
      return memory_release(f.memory_release().rank());
    case pb::HostFault::kDiskFull:
      return disk_full(f.disk_full().path(), f.disk_full().bytes());
    case pb::HostFault::kDiskFree:
      return disk_free(f.disk_free().path());
    case pb::HostFault::kFileDamage:
      return file_damage(f.file_damage().glob(), f.file_damage().action(), f.file_damage().bytes(),
                         f.file_damage().seed(), f.file_damage().tag());
    case pb::HostFault::kFileRestore:
      return file_restore(f.file_restore().tag());
    case pb::HostFault::kCpuQuota:
      return cpu_quota(f.cpu_quota().rank(), f.cpu_quota().quota_us(), f.cpu_quota().period_us());
    case pb::HostFault::kCpuRelease:
      return cpu_release(f.cpu_release().rank());
    case pb::HostFault::kShmMount:
      return shm_mount(f.shm_mount().bytes());
    case pb::HostFault::kShmRelease:
      return shm_release();
    case pb::HostFault::kHidePlugin:
      return hide_plugin(f.hide_plugin().rank(), f.hide_plugin().library());
    case pb::HostFault::kUnhidePlugin:
      return unhide_plugin(f.unhide_plugin().rank(), f.unhide_plugin().library());
    case pb::HostFault::OP_NOT_SET:
      break;
  }
  raise<Error>(
      "a host fault without an operation (allowed: memory_limit, memory_status, memory_release, "
      "disk_full, disk_free, file_damage, file_restore, cpu_quota, cpu_release, shm_mount, "
      "shm_release, hide_plugin, unhide_plugin)");
}

nlohmann::json AgentFaults::memory_limit(int rank, int64_t bytes) {
  if (rank < 0) raise<Error>("memory_limit: rank {} is not a rank (0 or more)", rank);
  if (bytes < (1 << 20)) {
    raise<Error>("memory_limit: {} bytes is below 1 MiB (a process cannot start in it)", bytes);
  }
  if (groups_.count(rank))
    raise<Error>("memory_limit: rank {} has a limit on {} already", rank, host_);
  auto g = RankCgroup::make("memory", rank, dir_, secret_, host_,
                            [&](faults::Cgroup& cg) { faults::limit_memory(cg, bytes); });
  g->bytes = bytes;
  // What the rank charged before it was moved comes along where the kernel still can.
  bool moves_charge = false;
  try {
    g->cg->write("memory.move_charge_at_immigrate", "1");
    moves_charge = true;
  } catch (const std::exception&) {
  }
  g->start();
  const std::string path = g->cg->path();
  groups_[rank] = std::move(g);
  return {{"cgroup", path}, {"limit", bytes}, {"moves_charge", moves_charge}, {"host", host_}};
}

RankCgroup& AgentFaults::group(int rank, const std::string& what) {
  auto it = groups_.find(rank);
  if (it == groups_.end()) {
    raise<Error>(
        "{}: rank {} has no memory cgroup of this agent on {} (refused: the agent touches "
        "only the groups it made)",
        what, rank, host_);
  }
  return *it->second;
}

nlohmann::json AgentFaults::memory_status(int rank) {
  return group(rank, "memory_status").counters();
}

nlohmann::json AgentFaults::memory_release(int rank) {
  auto r = group(rank, "memory_release").release();
  groups_.erase(rank);
  return r;
}

nlohmann::json AgentFaults::disk_full(const std::string& rel, int64_t bytes) {
  const std::string where = run_path(dir_, rel, "disk_full");
  if (bytes <= 0) raise<Error>("disk_full: size {} is not above 0", bytes);
  if (mounts_.count(rel)) raise<Error>("disk_full: {} is mounted by this agent already", where);
  fs::create_directories(where);
  const std::string opts = fmt::format("size={},mode=0755", bytes);
  // The source names this agent: the next agent on the host removes it should this one die.
  const std::string source = fmt::format("{}{}", kDiskSource, ::getpid());
  if (::mount(source.c_str(), where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    raise<Error>("disk_full: cannot mount a tmpfs ({}) on {}: {}", opts, where,
                 std::strerror(errno));
  }
  mounts_[rel] = where;
  return {{"mount", where}, {"fs", "tmpfs"}, {"size_bytes", bytes}, {"host", host_}};
}

nlohmann::json AgentFaults::disk_free(const std::string& rel) {
  auto it = mounts_.find(rel);
  if (it == mounts_.end()) {
    raise<Error>("disk_free: '{}' is not a mount this agent made on {}; refused", rel, host_);
  }
  const std::string where = it->second;
  if (::umount2(where.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    raise<Error>("disk_free: cannot unmount {}: {}", where, std::strerror(errno));
  }
  mounts_.erase(it);
  return {{"unmounted", where}, {"host", host_}};
}

nlohmann::json AgentFaults::file_damage(const std::string& glob, const std::string& action,
                                        int64_t bytes, uint64_t seed, const std::string& tag) {
  check_tag(tag);
  run_path(dir_, glob, "file_damage");  // the glob's words stay inside the run directory
  if (action != "delete" && action != "truncate" && action != "corrupt") {
    raise<Error>("file_damage: action '{}' (allowed: delete, truncate, corrupt)", action);
  }
  const auto hits = faults::match_run_files(dir_, glob);
  if (hits.empty()) {
    raise<Error>("no file in the run directory matches '{}' (on host {})", glob, host_);
  }
  auto& kept = backups_[tag];
  nlohmann::json files = nlohmann::json::array();
  for (const auto& rel : hits) {
    const std::string file = dir_ + "/" + rel;
    if (!kept.count(file)) {
      const std::string copy = fmt::format("{}/.faultline/agent-{}/{}/{}", dir_, host_, tag, rel);
      fs::create_directories(fs::path(copy).parent_path());
      fs::copy_file(file, copy, fs::copy_options::overwrite_existing);
      kept[file] = copy;
    }
    files.push_back(faults::damage_file(dir_, rel, action, bytes, seed));
  }
  return {{"files", files}, {"host", host_}};
}

nlohmann::json AgentFaults::file_restore(const std::string& tag) {
  check_tag(tag);
  auto it = backups_.find(tag);
  if (it == backups_.end()) {
    raise<Error>("file_restore: no damage '{}' by this agent on {}; refused", tag, host_);
  }
  std::vector<std::string> restored, errors;
  for (const auto& [file, copy] : it->second) {
    std::error_code ec;
    fs::copy_file(copy, file, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      errors.push_back(fmt::format("{}: {}", file, ec.message()));
    } else {
      restored.push_back(fs::relative(file, dir_).string());
    }
    fs::remove(copy, ec);
  }
  backups_.erase(it);
  return {{"restored", restored}, {"errors", errors}, {"host", host_}};
}

std::vector<std::string> AgentFaults::sweep_stale() {
  std::vector<std::string> lines;
  for (const auto& root : {faults::memory_cgroup_root(), faults::cpu_cgroup_root()}) {
    if (const int n = faults::sweep_stale_cgroups(root); n > 0) {
      lines.push_back(fmt::format(
          "removed {} cgroup(s) of agents or harnesses that are gone from {}", n, root));
    }
  }
  // /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPEROPTS".
  std::ifstream info("/proc/self/mountinfo");
  std::vector<std::string> stale;
  for (std::string line; std::getline(info, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string f, point, fstype, source;
    for (int i = 0; i < 5 && head >> f; ++i) point = f;
    tail >> fstype >> source;
    if (fstype != "tmpfs" || source.rfind(kDiskSource, 0) != 0) continue;
    const std::string owner_s = source.substr(std::strlen(kDiskSource));
    if (owner_s.empty() || owner_s.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t owner = std::atoi(owner_s.c_str());
    if (owner <= 0 || owner == ::getpid() || ::kill(owner, 0) == 0 || errno == EPERM) continue;
    stale.push_back(point);
  }
  for (const auto& point : stale) {
    const bool ok = ::umount2(point.c_str(), MNT_DETACH) == 0;
    lines.push_back(ok ? fmt::format("unmounted {} (its agent is gone)", point)
                       : fmt::format("cannot unmount {}: {}", point, std::strerror(errno)));
  }
  return lines;
}

std::vector<std::string> AgentFaults::cleanup() {
  std::vector<std::string> lines;
  while (!backups_.empty()) {
    const std::string tag = backups_.begin()->first;
    try {
      lines.push_back("file_restore " + file_restore(tag).dump());
    } catch (const std::exception& e) {
      backups_.erase(tag);
      lines.push_back(e.what());
    }
  }
  while (!mounts_.empty()) {
    const std::string rel = mounts_.begin()->first;
    try {
      lines.push_back("disk_free " + disk_free(rel).dump());
    } catch (const std::exception& e) {
      mounts_.erase(rel);
      lines.push_back(e.what());
    }
  }
  while (!hidden_.empty()) {
    const auto key = hidden_.begin()->first;
    try {
      lines.push_back("unhide_plugin " + unhide_plugin(key.first, key.second).dump());
    } catch (const std::exception& e) {
      hidden_.erase(key);
      lines.push_back(e.what());
    }
  }
  if (shm_holder_ != 0) lines.push_back("shm_release " + shm_release().dump());
  while (!cpu_groups_.empty()) {
    const int rank = cpu_groups_.begin()->first;
    try {
      lines.push_back("cpu_release " + cpu_release(rank).dump());
    } catch (const std::exception& e) {
      cpu_groups_.erase(rank);
      lines.push_back(e.what());
    }
  }
  while (!groups_.empty()) {
    const int rank = groups_.begin()->first;
    try {
      lines.push_back("memory_release " + memory_release(rank).dump());
    } catch (const std::exception& e) {
      groups_.erase(rank);
      lines.push_back(e.what());
    }
  }
  return lines;
}

}  // namespace fl::harness
