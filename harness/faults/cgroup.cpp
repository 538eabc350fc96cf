#include "harness/faults/cgroup.hpp"

#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
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
CgroupVersion cgroup_version(const std::string& root) {
  struct statfs fs_info {};
  if (::statfs(root.c_str(), &fs_info) == 0) {
    if (fs_info.f_type == CGROUP2_SUPER_MAGIC) return CgroupVersion::kV2;
    if (fs_info.f_type == CGROUP_SUPER_MAGIC) return CgroupVersion::kV1;
  }
  std::error_code ec;
  return fs::exists(root + "/cgroup.controllers", ec) ? CgroupVersion::kV2 : CgroupVersion::kV1;
}

namespace {

// The words of a space-separated list file, one space apart.
std::string words(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string w; in >> w;) out += (out.empty() ? "" : " ") + w;
  return out;
}

bool lists_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w == word) return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool is_fs(const std::string& path, long magic) {
  struct statfs fs_info {};
  return ::statfs(path.c_str(), &fs_info) == 0 && fs_info.f_type == magic;
}

// v2: a group gets a controller only if its parent's cgroup.subtree_control lists it. Enabled
// here when the root offers it and does not yet hand it down (the kernel refuses when the root
// holds processes itself and is not the hierarchy's top: then the error says what to do).
void check_v2_controller(const std::string& root, const std::string& setting,
                         const std::string& what, const std::string& controller) {
  if (controller.empty() || lists_word(read_file(root + "/cgroup.subtree_control"), controller)) {
    return;
  }
  const std::string offered = read_file(root + "/cgroup.controllers");
  if (!lists_word(offered, controller)) {
    raise<Error>(
        "{}: the cgroup v2 hierarchy at {} does not offer the {} controller (cgroup.controllers: "
        "'{}'; a controller a cgroup v1 hierarchy holds is not available in v2); set {} to a "
        "hierarchy that has it",
        what, root, controller, words(offered), setting);
  }
  std::ofstream out(root + "/cgroup.subtree_control");
  out << "+" << controller;
  out.flush();
  if (!out) {
    raise<Error>(
        "{}: the cgroup v2 hierarchy at {} does not hand the {} controller to its groups "
        "(cgroup.subtree_control) and enabling it failed ({}); enable it (echo +{} > "
        "{}/cgroup.subtree_control) or set {} to a cgroup that does",
        what, root, controller, std::strerror(errno), controller, root, setting);
  }
}

}  // namespace

std::string auto_cgroup_root(const std::string& controller, const std::string& base) {
  const std::string v1 = base + "/" + controller;
  if (is_fs(v1, CGROUP_SUPER_MAGIC)) return v1;
  if (is_fs(base, CGROUP2_SUPER_MAGIC)) return base;
  const std::string hybrid = base + "/unified";
  if (is_fs(hybrid, CGROUP2_SUPER_MAGIC) &&
      lists_word(read_file(hybrid + "/cgroup.controllers"), controller)) {
    return hybrid;
  }
  return v1;
}

void check_cgroup_root(const std::string& root, const std::string& setting, const std::string& what,
                       const std::string& controller) {
  const bool v2 = cgroup_version(root) == CgroupVersion::kV2;
  if (::access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    raise<Error>("{}: the cgroup {} hierarchy at {} is not writable ({}); set {} or run as root",
                 what, v2 ? "v2" : "v1", root, std::strerror(errno), setting);
  }
  if (v2) check_v2_controller(root, setting, what, controller);
}

Cgroup::Cgroup(const std::string& root, const std::string& setting, const std::string& run_dir,
               int rank, const std::string& what, const std::string& controller)
    : version_(cgroup_version(root)) {
  check_cgroup_root(root, setting, what, controller);
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
  if (g.v2()) {
    g.write("memory.max", std::to_string(bytes));
    // Without a swap limit the rank would swap instead of being killed (no swap: no file).
    if (fs::exists(g.path() + "/memory.swap.max")) g.write("memory.swap.max", "0");
    return;
  }
  g.write("memory.limit_in_bytes", std::to_string(bytes));
  // Without swap accounting the rank would swap instead of being killed.
  if (fs::exists(g.path() + "/memory.memsw.limit_in_bytes")) {
    g.write("memory.memsw.limit_in_bytes", std::to_string(bytes));
  }
  g.write("memory.swappiness", "0");
}

std::string cpu_max_line(int64_t quota_us, int64_t period_us) {
  return quota_us < 0 ? fmt::format("max {}", period_us)
                      : fmt::format("{} {}", quota_us, period_us);
}

void set_cpu_quota(const Cgroup& g, int64_t quota_us, int64_t period_us) {
  if (g.v2()) {
    g.write("cpu.max", cpu_max_line(quota_us, period_us));
    return;
  }
  g.write("cpu.cfs_period_us", std::to_string(period_us));
  g.write("cpu.cfs_quota_us", std::to_string(quota_us));
}

int64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      return std::atoll(line.c_str() + key.size() + 1);
    }
  }
  return -1;
}

nlohmann::json cpu_stat(const Cgroup& g) {
  const std::string stat = g.read("cpu.stat");
  // v1 counts the throttled time in ns (throttled_time), v2 in us (throttled_usec).
  int64_t throttled_ns = keyed_value(stat, "throttled_time");
  if (g.v2()) {
    const int64_t us = keyed_value(stat, "throttled_usec");
    throttled_ns = us < 0 ? -1 : us * 1000;
  }
  return {{"nr_periods", keyed_value(stat, "nr_periods")},
          {"nr_throttled", keyed_value(stat, "nr_throttled")},
          {"throttled_ns", throttled_ns}};
}

nlohmann::json memory_counters(const Cgroup& g) {
  const auto number = [&](const char* file) {
    const std::string text = g.read(file);
    return text.empty() ? int64_t{-1} : std::atoll(text.c_str());
  };
  if (g.v2()) {
    const std::string events = g.read("memory.events");
    return {{"usage", number("memory.current")},
            {"max_usage", number("memory.peak")},  // kernels from 5.19 on
            {"failcnt", std::max<int64_t>(0, keyed_value(events, "max"))},
            {"oom_kills", std::max<int64_t>(0, keyed_value(events, "oom_kill"))},
            {"under_oom", 0},
            {"cgroup_version", 2}};
  }
  const std::string oom = g.read("memory.oom_control");
  return {{"usage", number("memory.usage_in_bytes")},
          {"max_usage", number("memory.max_usage_in_bytes")},
          {"failcnt", number("memory.failcnt")},
          {"oom_kills", std::max<int64_t>(0, keyed_value(oom, "oom_kill"))},
          {"under_oom", std::max<int64_t>(0, keyed_value(oom, "under_oom"))},
          {"cgroup_version", 1}};
}

std::string cgroup_of(pid_t pid, const std::string& controller, CgroupVersion version) {
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':');
    const auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (version == CgroupVersion::kV2) {
      if (line.compare(0, b + 1, "0::") == 0) return line.substr(b + 1);
      continue;
    }
    const std::string ctl = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctl.find("," + controller + ",") != std::string::npos) return line.substr(b + 1);
  }
  return "";
}

}  // namespace fl::harness::faults
