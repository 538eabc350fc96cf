// fl-launch: a per-node launcher in the style of DeepSpeed's and torchrun's. It starts `--nproc`
// copies of a worker command with RANK = --rank-base + i (LOCAL_RANK i, or the caller's
// LOCAL_RANK when it starts one process), waits for them, and when one fails it stops the others
// and exits with that one's status, as torchrun's agent does.
//
// Before it starts anything it reads CUDA_VISIBLE_DEVICES the way it was told to:
//   --devices int   every entry through Python's int() (DeepSpeed's runner did
//                   `[int(x) for x in slots.split(",")]`): a GPU-<uuid> or MIG-<uuid> entry fails
//                   with int()'s own ValueError text and exit status 1;
//   --devices cuda  any entry the CUDA runtime accepts (indices, GPU-<uuid>, MIG-<uuid>) is
//                   passed on for the worker to resolve.
//
// Like torchrun's agent, the launcher whose ranks include rank 0 hosts the rendezvous store: it
// binds and listens on MASTER_ADDR:MASTER_PORT before it starts any worker and hands the listening
// socket to its rank 0 in FAULTLINE_STORE_LISTEN_FD (torchrun tells its workers the same with
// TORCHELASTIC_USE_AGENT_STORE). A second launcher that also starts rank 0 fails on the bind,
// before it starts anything, with the store's EADDRINUSE error and exit status 1. Not done when
// FAULTLINE_STORE_HOST=external (the store is someone else's) or MASTER_ADDR is not an address.
//
// The harness runs it when a scenario's `launcher:` fault wraps the ranks (harness/faults/
// launcher.cpp): started once per rank with --nproc 1 it is a correct wrapper; started once per
// rank with --nproc = the node's ranks it is a launcher run inside another launcher, and every
// copy starts the whole node again.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" char** environ;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int sig) {
  g_stop = sig;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "fl-launch: %s\nusage: fl-launch [--nproc N] [--rank-base B] [--devices int|cuda] "
               "-- PROGRAM [ARGS...]\n",
               why);
  std::exit(2);
}

// Python's int(x, 10) on a str: surrounding whitespace, an optional sign, digits (single
// underscores between digits allowed).
bool python_int(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  if (b < e && (s[b] == '+' || s[b] == '-')) ++b;
  if (b == e) return false;
  bool prev_digit = false;
  for (size_t i = b; i < e; ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      prev_digit = true;
    } else if (s[i] == '_' && prev_digit && i + 1 < e &&
               std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      prev_digit = false;
    } else {
      return false;
    }
  }
  return true;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

// The rendezvous store's listening socket, bound before any worker starts (close-on-exec: only
// rank 0 gets it, by dup2 past exec). -1 when MASTER_ADDR is not a numeric address; exits 1 with
// the store's own error text (and PyTorch's line for it) when the port is taken.
int listen_store() {
  const std::string addr = env_or("MASTER_ADDR", "127.0.0.1");
  const std::string port_text = env_or("MASTER_PORT", "29500");
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) return -1;  // the worker reports the bad setting
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return -1;
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as the store's own bind
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    ::close(fd);
    const std::string what = err == EADDRINUSE
                                 ? "address already in use (EADDRINUSE): another process holds it"
                                 : std::strerror(err);
    std::fprintf(stderr,
                 "fl-launch: rendezvous store cannot listen on %s:%ld: %s\n"
                 "RuntimeError: The server socket has failed to listen on any local network "
                 "address. The server socket has failed to bind to [::]:%ld (errno: %d - %s).\n",
                 addr.c_str(), port, what.c_str(), port, err, std::strerror(err));
    std::exit(1);
  }
  return fd;
}

struct LaunchOptions {
  int nproc = 1;
  long rank_base = -1;  // -1: the caller's RANK
  std::string devices = "cuda";
  int program = 0;  // argv index of the program to launch
};

// The options before `--`; a bad one ends the launcher with its usage and status 2.
LaunchOptions parse_options(int argc, char** argv) {
  LaunchOptions o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) usage(("option " + a + " needs a value").c_str());
    const std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--nproc") {
      o.nproc = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != '\0' || o.nproc < 1 || o.nproc > 256) usage("--nproc must be 1-256");
    } else if (a == "--rank-base") {
      o.rank_base = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || o.rank_base < 0) usage("--rank-base must be a rank (0 or more)");
    } else if (a == "--devices") {
      if (v != "int" && v != "cuda") usage("--devices must be int or cuda");
      o.devices = v;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (i >= argc) usage("no program to launch (give it after --)");
  o.program = i;
  return o;
}

// --devices int: every CUDA_VISIBLE_DEVICES entry must pass Python's int(), else DeepSpeed's
// error and false.
bool devices_readable(const std::string& devices) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr || devices != "int") return true;
  for (const auto& slot : split_commas(cvd)) {
    if (!python_int(slot)) {
      std::fprintf(stderr,
                   "fl-launch: cannot read CUDA_VISIBLE_DEVICES='%s'\nTraceback (most recent "
                   "call last):\n  File \"fl-launch\", in parse_resource_filter\n    slots = "
                   "[int(x) for x in slots.split(\",\")]\nValueError: invalid literal for int() "
                   "with base 10: '%s'\n",
                   cvd, slot.c_str());
      return false;
    }
  }
  return true;
}

// In the forked child: the environment of worker `rank`, then exec (127 when that fails).
[[noreturn]] void exec_worker(char** argv, long rank, const std::string& local, int nproc,
                              int store_fd, const std::string& outer_rank) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", local.c_str(), 1);
  if (nproc > 1) ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::unsetenv("FAULTLINE_STORE_LISTEN_FD");  // not an outer launcher's socket
  if (rank == 0 && store_fd >= 0) {
    // F_DUPFD's copy is not close-on-exec: rank 0 alone inherits the socket.
    const int fd = ::fcntl(store_fd, F_DUPFD, 3);
    if (fd >= 0) ::setenv("FAULTLINE_STORE_LISTEN_FD", std::to_string(fd).c_str(), 1);
  }
  if (std::to_string(rank) != outer_rank) {
    // A process the harness did not start under this rank: its telemetry files go beside
    // the wrapping rank's, not over them.
    const std::string dir = env_or("FAULTLINE_FLIGHT_RECORDER_DIR", ".");
    const std::string tag =
        "/launched-rank" + std::to_string(rank) + "-" + std::to_string(::getpid());
    ::setenv("FAULTLINE_EVENTS_FILE", (dir + tag + ".events.jsonl").c_str(), 1);
    ::setenv("FAULTLINE_FIRED_LOG", (dir + tag + ".fired.jsonl").c_str(), 1);
  }
  ::execvp(argv[0], argv);
  std::fprintf(stderr, "fl-launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  std::_Exit(127);
}

// The started workers, stopped together.
struct Workers {
  std::vector<pid_t> pids;
  std::vector<bool> reaped;
  void stop_all(int sig) const {
    for (size_t k = 0; k < pids.size(); ++k) {
      if (!reaped[k]) ::kill(pids[k], sig);
    }
  }
};

// Waits for every worker. The first that fails gives the result (its exit status, or 128 + its
// signal) and stops the others; so does a SIGTERM or SIGINT to the launcher.
int wait_all(Workers& w, long rank_base) {
  int result = 0;
  size_t alive = w.pids.size();
  bool stopping = false;
  while (alive > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) {
        if (g_stop != 0 && !stopping) {
          stopping = true;
          w.stop_all(g_stop);
        }
        continue;
      }
      break;
    }
    size_t idx = 0;
    while (idx < w.pids.size() && w.pids[idx] != pid) ++idx;
    if (idx == w.pids.size()) continue;
    w.reaped[idx] = true;
    --alive;
    int code = 0;
    if (WIFEXITED(status)) code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) code = 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      std::fprintf(stderr, "fl-launch: process %zu of %zu (RANK %ld, pid %d) failed: %s %d%s\n",
                   idx, w.pids.size(), rank_base + static_cast<long>(idx), pid,
                   WIFSIGNALED(status) ? "signal" : "exit status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : code,
                   alive > 0 ? "; stopping the others" : "");
      if (!stopping) {
        stopping = true;
        w.stop_all(SIGTERM);
      }
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  LaunchOptions o = parse_options(argc, argv);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // end with whoever started this launcher
  if (!devices_readable(o.devices)) return 1;
  const std::string outer_rank = env_or("RANK", "0");
  const std::string outer_local = env_or("LOCAL_RANK", "0");
  if (o.rank_base < 0) o.rank_base = std::strtol(outer_rank.c_str(), nullptr, 10);

  const int store_fd =
      o.rank_base == 0 && env_or("FAULTLINE_STORE_HOST", "rank0") == "rank0" ? listen_store() : -1;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  Workers w;
  for (int k = 0; k < o.nproc; ++k) {
    const long rank = o.rank_base + k;
    const std::string local = o.nproc == 1 ? outer_local : std::to_string(k);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fl-launch: fork");
      w.stop_all(SIGTERM);
      return 1;
    }
    if (pid == 0) exec_worker(argv + o.program, rank, local, o.nproc, store_fd, outer_rank);
    w.pids.push_back(pid);
    w.reaped.push_back(false);
  }
  if (store_fd >= 0) ::close(store_fd);  // rank 0 serves it now
  return wait_all(w, o.rank_base);
}
