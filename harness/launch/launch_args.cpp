#include "harness/launch/launch_args.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "base/private_dir.hpp"
#include "base/settings.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/worker_options.hpp"
#include "harness/model/workload_kinds.hpp"

extern "C" char** environ;

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kBinDir, std::string, "FAULTLINE_BIN_DIR", "",
                  "Directory holding the workers (fl-train, fl-infer; default: this build's)");

std::string worker_binary(const std::string& kind) {
  const WorkloadKind& k = workload_kind(kind);
  const std::string dir = kBinDir.get();
  if (!dir.empty() && k.own_worker()) return dir + "/" + k.binary;
  return k.build_path;
}

std::string make_run_id(const std::string& name) {
  const auto now = std::chrono::system_clock::now();
  std::random_device rd;
  return fmt::format("{:%Y%m%d-%H%M%S}-{}-{:04x}",
                     fmt::localtime(std::chrono::system_clock::to_time_t(now)), name,
                     rd() & 0xffff);
}

namespace {
std::function<void(const std::string&)> g_after_mkdir_hook;

// The directory just opened must be the one mkdir made: ours, 0700, empty. Another user who can
// write the results directory could have put their own (or a symlink) at its name in between.
void check_fresh_run_dir(const DirFd& d, const std::string& results) {
  struct stat st {};
  if (::fstat(d.fd(), &st) != 0) raise<Error>("{}: {}", d.path(), std::strerror(errno));
  int entries = 0;
  if (DIR* it = ::fdopendir(::dup(d.fd()))) {
    while (const dirent* e = ::readdir(it)) {
      entries += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
    }
    ::closedir(it);
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 || entries != 0) {
    raise<Error>(
        "{}: refused: not the run directory the harness just created (owner uid {}, mode {:04o}, "
        "{} entries; expected uid {}, no access for others, empty): someone who can write {} "
        "replaced it",
        d.path(), st.st_uid, st.st_mode & 07777, entries, ::geteuid(), results);
  }
}
}  // namespace

void set_run_dir_hook_for_tests(std::function<void(const std::string& dir)> hook) {
  g_after_mkdir_hook = std::move(hook);
}

CreatedRunDir make_run_dir(const std::string& results_dir, const std::string& run_id,
                           const std::string& scenario_name, bool allow_shared) {
  // A run id is one path component: `--run-id ../x`, an absolute path or a scenario name with a
  // slash would put the run outside the results directory.
  if (!run_id.empty()) check_path_component("--run-id", run_id);
  CreatedRunDir out;
  out.warning = make_private_dir(results_dir, "--results", allow_shared);
  const DirFd results = DirFd::open(results_dir);
  for (int tries = 0;; ++tries) {
    out.id = run_id.empty() ? make_run_id(scenario_name) : run_id;
    if (run_id.empty()) check_path_component("the run id made from the scenario's name", out.id);
    out.dir = fs::absolute(fs::path(results_dir) / out.id).lexically_normal().string();
    if (::mkdirat(results.fd(), out.id.c_str(), 0700) == 0) {
      if (g_after_mkdir_hook) g_after_mkdir_hook(out.dir);
      try {
        out.fd = DirFd::open_at(results.fd(), out.id, out.dir);
      } catch (const Error& e) {
        raise<Error>("{} (someone who can write {} replaced the run directory)", e.what(),
                     results_dir);
      }
      check_fresh_run_dir(out.fd, results_dir);
      return out;
    }
    if (errno != EEXIST) {
      raise<Error>("{}: cannot create the run directory: {}", out.dir, std::strerror(errno));
    }
    if (!run_id.empty() || tries >= 20) {
      raise<Error>("{}: the run directory already exists", out.dir);
    }
  }
}

std::pair<std::string, std::string> create_run_dir(const std::string& results_dir,
                                                   const std::string& run_id,
                                                   const std::string& scenario_name) {
  auto d = make_run_dir(results_dir, run_id, scenario_name, false);
  return {d.id, d.dir};
}

void check_path_component(const std::string& what, const std::string& value) {
  bool ok = !value.empty() && value.size() <= 200 && value[0] != '.' && value[0] != '-';
  for (char c : value) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-' || c == '+');
  }
  if (!ok) {
    std::string shown;
    for (char c : value.substr(0, 80)) {
      shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                   ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                   : std::string(1, c);
    }
    throw ConfigError(fmt::format(
        "{} '{}': must be one path component under the results directory: 1 to 200 letters, "
        "digits, '.', '_', '-' or '+', not starting with '.' or '-'",
        what, shown));
  }
}

void check_env_key(int rank, const std::string& key) {
  bool ok = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
  for (char c : key) {
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (!ok) {
    std::string shown;
    for (char c : key.substr(0, 80)) {
      shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                   ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                   : std::string(1, c);
    }
    throw ConfigError(fmt::format(
        "rank {}: environment variable name '{}' is not allowed (names are letters, digits and "
        "'_', not starting with a digit)",
        rank, shown));
  }
}

namespace {
// Can a listener bind 127.0.0.1:port right now?
bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}
}  // namespace

// The rendezvous port is chosen below the kernel's ephemeral range: ports there are handed to
// every outgoing connection (MPI, gRPC, other runs' stores), so one that is free now may be a
// client's source port by the time rank 0 listens (seen once in 20 smoke suites: EADDRINUSE).
// Below the range only listeners take ports; concurrent harnesses pick at random.
int free_port() {
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  std::random_device rd;
  std::mt19937 gen(rd());
  if (low > 12000) {
    std::uniform_int_distribution<int> pick(10000, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = pick(gen);
      if (bindable(port)) return port;
    }
  }
  // No room below the range: let the kernel choose.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> worker_args(const Scenario& s, const std::string& run_dir,
                                     const std::string& resume_from) {
  const WorkloadKind& kind = workload_kind(s.workload.kind);
  std::vector<std::string> a{worker_binary(s.workload.kind)};
  for (auto& x : worker_option_flags(kind.name, s.workload.options)) a.push_back(std::move(x));
  kind.launch_args(s, run_dir, resume_from, a);
  for (auto& x : s.workload.extra_args) a.push_back(x);
  return a;
}

std::map<std::string, std::string> base_env() {
  std::map<std::string, std::string> m;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    // A run's ranks get their identity and plans from the scenario only.
    if (k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "MASTER_ADDR" ||
        k == "MASTER_PORT" || k.rfind("FAULTLINE_", 0) == 0 || k.rfind("OMPI_COMM_WORLD", 0) == 0 ||
        k.rfind("PMIX_", 0) == 0 || k.rfind("OMPI_MCA_", 0) == 0) {
      if (k != "FAULTLINE_LOG_LEVEL" && k != "FAULTLINE_COMM_SPIN_US") continue;
    }
    m[k] = kv.substr(eq + 1);
  }
  return m;
}

std::string check_restart_args(const std::vector<std::string>& args, const std::string& run_dir) {
  enum class V { kNone, kNumber, kWord, kPath };
  static const std::map<std::string, V> allowed = {
      {"--micro-batch", V::kNumber}, {"--grad-accum", V::kNumber},
      {"--steps", V::kNumber},       {"--epochs", V::kNumber},
      {"--samples", V::kNumber},     {"--lr", V::kNumber},
      {"--warmup", V::kNumber},      {"--clip", V::kNumber},
      {"--loss-scale", V::kNumber},  {"--min-loss-scale", V::kNumber},
      {"--eval-every", V::kNumber},  {"--eval-batches", V::kNumber},
      {"--save-every", V::kNumber},  {"--skip-batches", V::kNumber},
      {"--data-seed", V::kNumber},   {"--check-replicas-every", V::kNumber},
      {"--precision", V::kWord},     {"--schedule", V::kWord},
      {"--metrics", V::kPath},       {"--save-dir", V::kPath},
      {"--resume", V::kPath},        {"--reset-loss-scale", V::kNone},
      {"--drop-last", V::kNone}};
  static const std::regex number(R"(^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$)");
  static const std::regex word(R"(^[A-Za-z0-9_.-]+$)");
  std::string names;
  for (auto& [k, v] : allowed) names += (names.empty() ? "" : ", ") + k;
  const fs::path root = fs::weakly_canonical(run_dir);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto it = allowed.find(a);
    if (it == allowed.end()) {
      return fmt::format("restart_job: argument '{}' is not allowed (allowed: {})", a, names);
    }
    if (it->second == V::kNone) continue;
    if (i + 1 >= args.size()) return fmt::format("restart_job: '{}' needs a value", a);
    const std::string& v = args[++i];
    if (it->second == V::kNumber && !std::regex_match(v, number)) {
      return fmt::format("restart_job: {} '{}' is not a number", a, v);
    }
    if (it->second == V::kWord && !std::regex_match(v, word)) {
      return fmt::format("restart_job: {} '{}' is not a plain word ([A-Za-z0-9_.-])", a, v);
    }
    if (it->second == V::kPath) {
      // Resolved as the worker will see it (symlinks followed), relative to its rank directory.
      const fs::path p = fs::weakly_canonical(
          fs::path(v).is_absolute() ? fs::path(v) : root / "ranks" / "rank0" / v);
      const auto rel = p.lexically_relative(root);
      if (v.empty() || rel.empty() || *rel.begin() == "..") {
        return fmt::format("restart_job: {} '{}' is outside the run directory {}", a, v,
                           root.string());
      }
    }
  }
  return "";
}

pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  return pid;
}

}  // namespace fl::harness
