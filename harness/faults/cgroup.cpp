#include "harness/faults/cgroup.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "faultline.";
}  // namespace

uint64_t process_start_ticks(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  const std::string stat(std::istreambuf_iterator<char>(in), {});
  // Field 22 (starttime) counts from the one after the command's closing parenthesis (field 2,
  // which may hold spaces and parentheses itself).
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::string owner_tag() {
  static const std::string tag =
      fmt::format("{}{}-{}", kPrefix, ::getpid(), process_start_ticks(::getpid()));
  return tag;
}

bool owner_alive(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return true;  // not faultline's: never ours to judge
  const char* p = name.c_str() + std::strlen(kPrefix);
  char* end = nullptr;
  const long pid = std::strtol(p, &end, 10);
  if (end == p || pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  if (*end != '-') return true;  // an older name, the pid alone: alive while that pid is
  // The pid is alive; it is the owner only if it started when the owner did (pids are reused).
  // Unknown (/proc hidden from us): alive, never swept on a guess.
  const uint64_t start = std::strtoull(end + 1, nullptr, 10);
  const uint64_t now = process_start_ticks(static_cast<pid_t>(pid));
  return now == 0 || now == start;
}
void check_cgroup_root(const std::string& root, const std::string& setting,
                       const std::string& what) {
  if (::access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    raise<Error>("{}: the cgroup v1 hierarchy at {} is not writable ({}); set {} or run as root",
                 what, root, std::strerror(errno), setting);
  }
}

Cgroup::Cgroup(const std::string& root, const std::string& setting, const std::string& run_dir,
               int rank, const std::string& what) {
  check_cgroup_root(root, setting, what);
  path_ = fmt::format("{}/{}.{}.rank{}", root, owner_tag(), fs::path(run_dir).filename().string(),
                      rank);
  if (::mkdir(path_.c_str(), 0755) != 0 && errno != EEXIST) {
    raise<Error>("{}: cannot create cgroup {}: {}", what, path_, std::strerror(errno));
  }
}

void Cgroup::write(const std::string& file, const std::string& value) const {
  std::ofstream out(path_ + "/" + file);
  out << value;
  out.flush();
  if (!out) {
    raise<Error>("cannot write '{}' to {}/{}: {}", value, path_, file, std::strerror(errno));
  }
}

std::string Cgroup::read(const std::string& file) const {
  std::ifstream in(path_ + "/" + file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool Cgroup::remove() {
  if (removed_) return true;
  for (int i = 0; i < 100 && ::rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  removed_ = !fs::exists(path_);
  return removed_;
}

std::vector<std::string> stale_cgroups(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !e.is_directory(ec) || owner_alive(name)) continue;
    out.push_back(e.path().string());
  }
  return out;
}

std::string remove_stale_cgroup(const std::string& path) {
  // What is left in it are ranks of the gone harness that outlived it (a rank ignoring its
  // parent-death signal, a launcher's daemon): nobody else's processes are in a faultline group.
  for (int i = 0; i < 50; ++i) {
    std::ifstream procs(path + "/cgroup.procs");
    bool any = false;
    for (long pid = 0; procs >> pid;) {
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
      any = true;
    }
    if (!any && ::rmdir(path.c_str()) == 0) return "";
    if (!any && errno != EBUSY) return std::strerror(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::rmdir(path.c_str()) == 0 ? ""
                                    : fmt::format("still busy after 1 s: {}", std::strerror(errno));
}

int sweep_stale_cgroups(const std::string& root) {
  int removed = 0;
  for (const auto& g : stale_cgroups(root)) removed += remove_stale_cgroup(g).empty() ? 1 : 0;
  return removed;
}

void limit_memory(const Cgroup& g, int64_t bytes) {
  g.write("memory.limit_in_bytes", std::to_string(bytes));
  // Without swap accounting the rank would swap instead of being killed.
  if (fs::exists(g.path() + "/memory.memsw.limit_in_bytes")) {
    g.write("memory.memsw.limit_in_bytes", std::to_string(bytes));
  }
  g.write("memory.swappiness", "0");
}

void set_cpu_quota(const Cgroup& g, int64_t quota_us, int64_t period_us) {
  g.write("cpu.cfs_period_us", std::to_string(period_us));
  g.write("cpu.cfs_quota_us", std::to_string(quota_us));
}

nlohmann::json cpu_stat(const Cgroup& g) {
  const std::string stat = g.read("cpu.stat");
  auto field = [&](const char* name) -> int64_t {
    const auto p = stat.find(std::string(name) + " ");
    return p == std::string::npos ? -1 : std::atoll(stat.c_str() + p + std::strlen(name) + 1);
  };
  return {{"nr_periods", field("nr_periods")},
          {"nr_throttled", field("nr_throttled")},
          {"throttled_ns", field("throttled_time")}};
}

}  // namespace fl::harness::faults
