#include "harness/faults/cgroup.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "faultline.";
}  // namespace

Cgroup::Cgroup(const std::string& root, const std::string& setting, const std::string& run_dir,
               int rank, const std::string& what) {
  if (::access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    raise<Error>("{}: the cgroup v1 hierarchy at {} is not writable ({}); set {} or run as root",
                 what, root, std::strerror(errno), setting);
  }
  path_ = fmt::format("{}/{}{}.{}.rank{}", root, kPrefix, ::getpid(),
                      fs::path(run_dir).filename().string(), rank);
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

int sweep_stale_cgroups(const std::string& root) {
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t owner = std::atoi(name.c_str() + std::strlen(kPrefix));
    if (owner > 0 && (::kill(owner, 0) == 0 || errno == EPERM)) continue;  // its harness lives
    if (::rmdir(e.path().c_str()) == 0) ++removed;
  }
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
