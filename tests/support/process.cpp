#include "tests/support/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace fl::test {

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::seconds timeout) {
  char path[] = "/tmp/faultline-test-out-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");

  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // No terminal input: a child in its own process group that reads stdin would be stopped.
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  auto start = std::chrono::steady_clock::now();
  int rc = posix_spawnp(&pid, argp[0], &fa, &attr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fd);
  if (rc != 0) {
    unlink(path);
    throw std::runtime_error(std::string("posix_spawnp ") + argv[0] + ": " + strerror(rc));
  }

  ProcessResult r;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() - start > timeout) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Whatever the command left in its process group goes too.
  kill(-pid, SIGKILL);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  unlink(path);
  return r;
}

namespace {

// The kernel's range for ephemeral ports (outgoing connections and bind to port 0).
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  if (in >> lo >> hi && lo > 1024 && hi >= lo) return {lo, hi};
  return {32768, 60999};
}

bool can_bind(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(s);
  return ok;
}

}  // namespace

// A port below the ephemeral range: a port the kernel handed out for bind(0) returns to the
// ephemeral pool when the probe closes, and any outgoing connection of another test (ctest runs
// two at a time) may take it before the worker binds it (EADDRINUSE, seen in CI). Below the
// range only explicit binds compete; each process walks its own pid-seeded sequence.
int free_port() {
  static int calls = 0;
  const int lo = 10000, hi = std::max(lo + 1000, ephemeral_range().first);
  const int span = hi - lo;
  // Successive calls of one process step 997 ports apart from a pid-seeded start.
  const long start = (static_cast<long>(getpid()) * 7919L + static_cast<long>(calls++) * 997L);
  for (int i = 0; i < span; ++i) {
    const int port = lo + static_cast<int>((start + i) % span);
    if (can_bind(port)) return port;
  }
  throw std::runtime_error("free_port: no free loopback port below the ephemeral range");
}

namespace {

// Open MPI keeps its session directory under <base>/ompi.<host>.<uid>; an mpirun that ends
// removes that directory once it is empty, and another test's mpirun starting at that moment
// fails (seen in CI: ctest runs two tests at a time, both under /tmp/ompi.vm.0). Each test
// process gets a base of its own, short enough for PMIx's socket paths (108 bytes), removed when
// the process that made it ends: a forked child that exits (a death test) leaves it to the parent,
// whose later mpirun calls still use it.
class MpiSessionBase {
 public:
  MpiSessionBase() : owner_(::getpid()) {
    char tmpl[] = "/tmp/flmpi.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      throw std::runtime_error(std::string("mpirun_prefix: mkdtemp: ") + std::strerror(errno));
    }
    path_ = tmpl;
  }
  ~MpiSessionBase() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  MpiSessionBase(const MpiSessionBase&) = delete;
  MpiSessionBase& operator=(const MpiSessionBase&) = delete;
  const std::string& path() const { return path_; }

 private:
  pid_t owner_;
  std::string path_;
};

}  // namespace

std::vector<std::string> mpirun_prefix(int ranks) {
  static const MpiSessionBase base;
  return {FAULTLINE_MPIRUN,
          "--allow-run-as-root",
          "--oversubscribe",
          "--bind-to",
          "none",
          "--mca",
          "orte_tmpdir_base",
          base.path(),
          "-np",
          std::to_string(ranks)};
}

}  // namespace fl::test
