// cpu_quota, shm and hide applied by a host's agent (HostFault 8-13 in faultline.proto): each
// does on its host what the fault does on the harness's machine, through the same functions
// (harness/faults/cgroup.hpp, shm_mount.hpp, plugin_links.hpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/agent/agent_faults.hpp"
#include "harness/agent/rank_cgroup.hpp"
#include "harness/faults/cgroup.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/plugin_links.hpp"
#include "harness/faults/shm_mount.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

// A child (`unshare --mount --propagation private sleep infinity`) holding a mount namespace of
// its own on this host; it dies with the agent's thread that made it (parent-death signal).
pid_t hold_mount_namespace() {
  const std::string mine = fs::read_symlink("/proc/self/ns/mnt").string();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) raise<Error>("shm_mount: cannot fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the agent died before the signal was armed
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
    }
    const char* argv[] = {"unshare", "--mount",  "--propagation", "private",
                          "sleep",   "infinity", nullptr};
    ::execvp(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::error_code ec;
    const auto theirs = fs::read_symlink(fmt::format("/proc/{}/ns/mnt", pid), ec);
    if (!ec && theirs.string() != mine) return pid;
    int status = 0;
    const bool ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (ended || std::chrono::steady_clock::now() > until) {
      if (!ended) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      raise<Error>(
          "shm_mount: no mount namespace of its own from `unshare --mount` ({}; it needs root or "
          "CAP_SYS_ADMIN on the host)",
          ended ? fmt::format("exit status {}", WEXITSTATUS(status)) : "not within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void check_rank(int rank, const char* what) {
  if (rank < 0) raise<Error>("{}: rank {} is not a rank (0 or more)", what, rank);
}

}  // namespace

std::unique_ptr<RankCgroup> RankCgroup::make(const std::string& controller, int rank,
                                             const std::string& run_dir, const std::string& secret,
                                             const std::string& host,
                                             const std::function<void(faults::Cgroup&)>& limit) {
  const bool memory = controller == "memory";
  const std::string root = memory ? faults::memory_cgroup_root() : faults::cpu_cgroup_root();
  faults::sweep_stale_cgroups(root);
  auto g = std::make_unique<RankCgroup>();
  g->controller = controller;
  g->rank = rank;
  g->root = root;
  g->secret = secret;
  std::error_code ec;
  g->rank_dir = fs::weakly_canonical(fmt::format("{}/ranks/rank{}", run_dir, rank), ec).string();
  g->cg.emplace(root, memory ? "FAULTLINE_CGROUP_ROOT" : "FAULTLINE_CPU_CGROUP_ROOT", run_dir, rank,
                (memory ? "memory_limit on " : "cpu_quota on ") + host);
  try {
    limit(*g->cg);
  } catch (...) {
    g->cg->remove();
    throw;
  }
  return g;
}

nlohmann::json AgentFaults::cpu_quota(int rank, int64_t quota_us, int64_t period_us) {
  check_rank(rank, "cpu_quota");
  if (period_us < 1000 || period_us > 1000000) {
    raise<Error>("cpu_quota: period {} us is not within 1000-1000000 (the kernel's range)",
                 period_us);
  }
  if (quota_us != -1 && quota_us < 1000) {
    raise<Error>("cpu_quota: quota {} us is below 1000 (the kernel's least; -1: no limit)",
                 quota_us);
  }
  auto it = cpu_groups_.find(rank);
  if (it == cpu_groups_.end()) {
    // The first request makes the group and starts moving the rank's processes into it.
    auto g = RankCgroup::make("cpu", rank, dir_, secret_, host_, [&](faults::Cgroup& cg) {
      faults::set_cpu_quota(cg, quota_us, period_us);
    });
    g->start();
    it = cpu_groups_.emplace(rank, std::move(g)).first;
  } else {
    faults::set_cpu_quota(*it->second->cg, quota_us, period_us);
  }
  auto r = it->second->counters();
  r.update({{"quota_us", quota_us}, {"period_us", period_us}, {"host", host_}});
  return r;
}

nlohmann::json AgentFaults::cpu_release(int rank) {
  auto it = cpu_groups_.find(rank);
  if (it == cpu_groups_.end()) {
    raise<Error>(
        "cpu_release: rank {} has no cpu cgroup of this agent on {} (refused: the agent touches "
        "only the groups it made)",
        rank, host_);
  }
  auto r = it->second->release();
  cpu_groups_.erase(it);
  r["host"] = host_;
  return r;
}

nlohmann::json AgentFaults::shm_mount(int64_t bytes) {
  if (bytes < 4096) raise<Error>("shm_mount: {} bytes is below one page (4096 or more)", bytes);
  if (shm_holder_ != 0) raise<Error>("shm_mount: /dev/shm is sized on {} already", host_);
  const pid_t holder = hold_mount_namespace();
  try {
    run_tool(faults::in_mount_of(holder, faults::shm_mount_argv(bytes)));
  } catch (...) {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
    throw;
  }
  shm_holder_ = holder;
  return {{"path", faults::kShmPath},
          {"size_bytes", bytes},
          {"namespace_pid", holder},
          {"namespace", fs::read_symlink(fmt::format("/proc/{}/ns/mnt", holder)).string()},
          {"host", host_}};
}

nlohmann::json AgentFaults::shm_release() {
  if (shm_holder_ == 0) {
    raise<Error>("shm_release: no /dev/shm of this agent on {}; refused", host_);
  }
  const pid_t holder = shm_holder_;
  shm_holder_ = 0;
  std::string error;
  try {
    run_tool(faults::in_mount_of(holder, faults::shm_umount_argv()));
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  nlohmann::json r = {{"unmounted", error.empty()}, {"path", faults::kShmPath}, {"host", host_}};
  if (!error.empty()) r["error"] = error;
  return r;
}

nlohmann::json AgentFaults::hide_plugin(int rank, const std::string& library) {
  check_rank(rank, "hide_plugin");
  const std::string links =
      run_path(dir_, fmt::format("ranks/rank{}/plugins", rank), "hide_plugin");
  auto r = faults::hide_plugin(faults::plugin_dir(), links, library, host_);
  hidden_[{rank, library}] = links;
  r["host"] = host_;
  return r;
}

nlohmann::json AgentFaults::unhide_plugin(int rank, const std::string& library) {
  auto it = hidden_.find({rank, library});
  if (it == hidden_.end()) {
    raise<Error>("unhide_plugin: '{}' was not hidden from rank {} by this agent on {}; refused",
                 library, rank, host_);
  }
  auto r = faults::unhide_plugin(faults::plugin_dir(), it->second, library);
  hidden_.erase(it);
  r["host"] = host_;
  return r;
}

}  // namespace fl::harness
