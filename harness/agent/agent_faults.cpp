#include "harness/agent/agent_faults.hpp"

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/file_ops.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/proto/faultline.pb.h"

namespace fl::harness {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

namespace {

constexpr const char* kDiskSource = "faultline-disk-full.";  // + the agent's pid

int64_t number_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key + " ");
  return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + key.size() + 1);
}

// The memory cgroup `pid` is in, relative to the hierarchy's root ("" when unknown).
std::string memory_cgroup_of(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':');
    const auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1);
    if (ctl == "memory" || ctl.find("memory,") == 0 || ctl.find(",memory") != std::string::npos)
      return line.substr(b + 1);
  }
  return "";
}

// How long ago `pid` started (ms; -1 when unknown): /proc/PID/stat's start time against uptime.
double age_ms(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field;) ++i;  // fields 3..21, then 22 is the start time
  double start_ticks = 0, uptime_s = 0;
  if (!(rest >> start_ticks)) return -1;
  std::ifstream("/proc/uptime") >> uptime_s;
  return (uptime_s - start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK))) * 1000.0;
}

}  // namespace

// One rank's memory cgroup on this host, and the watcher that moves the rank's processes into it
// as soon as they exist (the rank starts after the limit is set, through mpirun's daemon).
struct AgentFaults::Group {
  int rank = 0;
  int64_t bytes = 0;
  std::string root, rank_dir, secret;
  std::optional<faults::Cgroup> cg;
  std::mutex mu;
  std::map<pid_t, std::string> adopted;  // pid -> the memory cgroup it came from
  std::vector<double> adopted_ms;        // how long after its start each was moved in
  std::vector<std::string> errors;
  std::atomic<bool> stop{false};
  std::thread watcher;

  // Is `pid` a process of rank `rank` of this run? It works in the rank's directory (mpirun
  // --wdir), its environment has RANK=rank, and the run's secret if it has one at all.
  bool is_rank(pid_t pid) const {
    std::error_code ec;
    if (fs::read_symlink(fmt::format("/proc/{}/cwd", pid), ec).string() != rank_dir) return false;
    std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    bool other_secret = false, has_rank = false;
    const std::string var = std::string(kControlSecretEnv) + "=";
    for (std::string kv; std::getline(env, kv, '\0');) {
      other_secret |= kv.rfind(var, 0) == 0 && kv != var + secret;
      has_rank |= kv == fmt::format("RANK={}", rank);
    }
    return has_rank && !other_secret;
  }

  bool adopt_new() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      const pid_t pid = std::atoi(name.c_str());
      {
        std::lock_guard lock(mu);
        if (adopted.count(pid)) continue;
      }
      if (!is_rank(pid)) continue;
      const std::string from = memory_cgroup_of(pid);
      try {
        cg->write("cgroup.procs", std::to_string(pid));
        std::lock_guard lock(mu);
        adopted[pid] = from;
        adopted_ms.push_back(age_ms(pid));
      } catch (const std::exception& x) {
        std::lock_guard lock(mu);
        if (errors.size() < 8) errors.push_back(x.what());
      }
    }
    std::lock_guard lock(mu);
    return !adopted.empty();
  }

  void watch() {
    while (!stop) {
      const bool any = adopt_new();
      // Quickly until the rank appears (it allocates from its first instructions on), then
      // seldom (a restarted rank is a new process).
      for (int i = 0; i < (any ? 10 : 1) && !stop; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  nlohmann::json counters() {
    const std::string oom = cg->read("memory.oom_control");
    std::vector<pid_t> pids, alive;
    {
      std::lock_guard lock(mu);
      for (const auto& [pid, from] : adopted) {
        pids.push_back(pid);
        if (fs::exists(fmt::format("/proc/{}", pid)) && is_rank(pid)) alive.push_back(pid);
      }
    }
    return {{"cgroup", cg->path()},
            {"limit", bytes},
            {"usage", std::atoll(cg->read("memory.usage_in_bytes").c_str())},
            {"max_usage", std::atoll(cg->read("memory.max_usage_in_bytes").c_str())},
            {"failcnt", std::atoll(cg->read("memory.failcnt").c_str())},
            {"oom_kills", number_after(oom, "oom_kill")},
            {"under_oom", number_after(oom, "under_oom")},
            {"pids", pids},
            {"adopted_after_ms", adopted_ms},
            {"alive", alive},
            {"errors", errors}};
  }

  // Stops watching, moves what is left back where it came from, removes the group.
  nlohmann::json release() {
    stop = true;
    if (watcher.joinable()) watcher.join();
    nlohmann::json r = counters();
    int moved = 0;
    std::map<pid_t, std::string> from;
    {
      std::lock_guard lock(mu);
      from = adopted;
    }
    std::istringstream left(cg->read("cgroup.procs"));
    for (pid_t pid = 0; left >> pid;) {
      std::string back = root;
      // A child of a rank came with it: back to where the rank was.
      const auto it = from.find(pid);
      const std::string rel = it != from.end() ? it->second
                              : from.empty()   ? std::string()
                                               : from.begin()->second;
      if (!rel.empty() && rel != "/" && fs::exists(root + rel + "/cgroup.procs")) back += rel;
      std::ofstream out(back + "/cgroup.procs");
      out << pid;
      out.flush();
      if (out) ++moved;
    }
    r["moved_back"] = moved;
    r["removed"] = cg->remove();
    return r;
  }

  ~Group() {
    stop = true;
    if (watcher.joinable()) watcher.join();
  }
};

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
    case pb::HostFault::OP_NOT_SET:
      break;
  }
  raise<Error>(
      "a host fault without an operation (allowed: memory_limit, memory_status, memory_release, "
      "disk_full, disk_free, file_damage, file_restore)");
}

nlohmann::json AgentFaults::memory_limit(int rank, int64_t bytes) {
  if (rank < 0) raise<Error>("memory_limit: rank {} is not a rank (0 or more)", rank);
  if (bytes < (1 << 20)) {
    raise<Error>("memory_limit: {} bytes is below 1 MiB (a process cannot start in it)", bytes);
  }
  if (groups_.count(rank))
    raise<Error>("memory_limit: rank {} has a limit on {} already", rank, host_);
  const std::string root = faults::memory_cgroup_root();
  faults::sweep_stale_cgroups(root);
  auto g = std::make_unique<Group>();
  g->rank = rank;
  g->bytes = bytes;
  g->root = root;
  g->secret = secret_;
  std::error_code ec;
  g->rank_dir = fs::weakly_canonical(fmt::format("{}/ranks/rank{}", dir_, rank), ec).string();
  g->cg.emplace(root, "FAULTLINE_CGROUP_ROOT", dir_, rank, "memory_limit on " + host_);
  try {
    g->cg->write("memory.limit_in_bytes", std::to_string(bytes));
    // Without swap accounting the rank would swap instead of being killed.
    if (fs::exists(g->cg->path() + "/memory.memsw.limit_in_bytes"))
      g->cg->write("memory.memsw.limit_in_bytes", std::to_string(bytes));
    g->cg->write("memory.swappiness", "0");
  } catch (...) {
    g->cg->remove();
    throw;
  }
  // What the rank charged before it was moved comes along where the kernel still can.
  bool moves_charge = false;
  try {
    g->cg->write("memory.move_charge_at_immigrate", "1");
    moves_charge = true;
  } catch (const std::exception&) {
  }
  Group* raw = g.get();
  g->watcher = std::thread([raw] { raw->watch(); });
  const std::string path = g->cg->path();
  groups_[rank] = std::move(g);
  return {{"cgroup", path}, {"limit", bytes}, {"moves_charge", moves_charge}, {"host", host_}};
}

AgentFaults::Group& AgentFaults::group(int rank, const std::string& what) {
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
  const std::string root = faults::memory_cgroup_root();
  if (const int n = faults::sweep_stale_cgroups(root); n > 0) {
    lines.push_back(fmt::format("removed {} cgroup(s) of agents or harnesses that are gone", n));
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
