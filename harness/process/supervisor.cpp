#include "harness/process/supervisor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace fl::harness {

namespace {

struct SigName {
  int sig;
  const char* name;
};
constexpr SigName kSignals[] = {
    {SIGHUP, "HUP"},   {SIGINT, "INT"},   {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},
    {SIGABRT, "ABRT"}, {SIGBUS, "BUS"},   {SIGFPE, "FPE"},   {SIGKILL, "KILL"},
    {SIGSEGV, "SEGV"}, {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"}, {SIGTERM, "TERM"},
    {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}, {SIGCONT, "CONT"}, {SIGSTOP, "STOP"}};

std::string resolve_exe(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return name;
}

// pid -> parent pid for every process visible in /proc.
std::map<pid_t, pid_t> process_parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string stat;
    std::getline(in, stat);
    const auto rp = stat.rfind(')');
    if (rp == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + rp + 1, " %c %d", &state, &ppid) == 2) out[pid] = ppid;
  }
  ::closedir(d);
  return out;
}

std::set<pid_t> descendants_of(pid_t root) {
  auto parents = process_parents();
  std::set<pid_t> out;
  bool grew = true;
  while (grew) {
    grew = false;
    for (auto& [pid, ppid] : parents) {
      if ((ppid == root || out.count(ppid)) && !out.count(pid)) {
        out.insert(pid);
        grew = true;
      }
    }
  }
  return out;
}

// Descriptors opened for a child before the fork (after it, only async-signal-safe calls are
// allowed); the parent closes them once the child has them, or on an error.
struct ChildFds {
  std::vector<int> fds;
  ChildFds() = default;
  ChildFds(const ChildFds&) = delete;
  ChildFds& operator=(const ChildFds&) = delete;
  ~ChildFds() { close_all(); }
  void close_all() {
    for (int fd : fds) ::close(fd);
    fds.clear();
  }
};

// Opens every path close-on-exec with `flags` into `out`; raises "<name>: cannot open <what><path>:
// <why>" at the first that fails.
void open_each(const std::vector<std::string>& paths, int flags, const std::string& name,
               const char* what, ChildFds& out) {
  for (const auto& path : paths) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      raise<Error>("{}: cannot open {}{}: {}", name, what, path, std::strerror(e));
    }
    out.fds.push_back(fd);
  }
}

// What a child does between fork and exec, all prepared before the fork.
struct ChildStart {
  const char* exe;
  char* const* argv;
  char* const* envp;
  const char* cwd;  // nullptr: the harness's
  pid_t parent;
  int devnull, out, err;
  int status;  // the child writes errno here when it cannot start
  const std::vector<int>& namespaces;
  const std::vector<int>& cgroup_procs;
};

// The child ends with 127, its errno on the status pipe for the parent's error message.
[[noreturn]] void child_failed(int status_fd) {
  const int e = errno;
  (void)!::write(status_fd, &e, sizeof(e));
  ::_exit(127);
}

// In the child: only async-signal-safe calls from here to exec.
[[noreturn]] void exec_child(const ChildStart& c) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != c.parent) ::_exit(127);  // the harness died before we got here
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  for (int fd : c.namespaces) {
    if (::setns(fd, 0) != 0) child_failed(c.status);
  }
  for (int fd : c.cgroup_procs) {
    // "0" is the writing process itself (cgroup v1 and v2).
    if (::write(fd, "0\n", 2) != 2) child_failed(c.status);
  }
  ::dup2(c.devnull, 0);
  ::dup2(c.out, 1);
  ::dup2(c.err, 2);
  if (c.cwd != nullptr && ::chdir(c.cwd) != 0) child_failed(c.status);
  ::execve(c.exe, c.argv, c.envp);
  child_failed(c.status);
}

}  // namespace

nlohmann::json exit_fields(const ExitInfo& x) {
  nlohmann::json d = {{"pid", x.pid},
                      {"class", x.klass},
                      {"code", x.code},
                      {"signaled", x.signaled},
                      {"by_harness", x.by_harness}};
  if (x.signaled) d["signal"] = signal_name(x.code);
  return d;
}

std::string signal_name(int sig) {
  for (auto& s : kSignals) {
    if (s.sig == sig) return std::string("SIG") + s.name;
  }
  return fmt::format("signal {}", sig);
}

int signal_number(const std::string& name) {
  std::string n = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  for (auto& s : kSignals) {
    if (n == s.name) return s.sig;
  }
  char* end = nullptr;
  const long v = std::strtol(n.c_str(), &end, 10);
  return (end != n.c_str() && *end == '\0' && v > 0 && v < 65) ? static_cast<int>(v) : -1;
}

std::string classify_exit(bool signaled, int code) {
  if (!signaled) return code == 0 ? "ok" : "error";
  switch (code) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
      return "crash";
    default:
      return "signal";
  }
}

struct Supervisor::Child {
  ProcessSpec spec;
  pid_t pid = 0;
  std::array<std::unique_ptr<boost::asio::posix::stream_descriptor>, 2> pipes;
  std::array<std::string, 2> partial;
  std::array<std::array<char, 8192>, 2> buf;
  int open_pipes = 2;
  bool reaped = false;
  bool delivered = false;
  bool by_harness = false;
  ExitInfo info;
  std::unique_ptr<boost::asio::steady_timer> drain_timer;
};

struct Supervisor::Sigchld {
  explicit Sigchld(boost::asio::io_context& io) : set(io, SIGCHLD) {}
  boost::asio::signal_set set;
};

Supervisor::Supervisor(boost::asio::io_context& io, LineFn on_line, ExitFn on_exit)
    : io_(io),
      sigchld_(std::make_unique<Sigchld>(io)),
      on_line_(std::move(on_line)),
      on_exit_(std::move(on_exit)),
      t0_(std::chrono::steady_clock::now()) {
  // Orphaned descendants (an MPI singleton's orted, a worker's helpers) are re-parented to us, so
  // teardown can reap them instead of leaving zombies to init.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  rearm(0);
}

void Supervisor::rearm(int) {
  sigchld_->set.async_wait([this](const boost::system::error_code& e, int s) {
    if (e) return;
    reap();
    rearm(s);
  });
}

Supervisor::~Supervisor() {
  boost::system::error_code ec;
  sigchld_->set.cancel(ec);
}

pid_t Supervisor::spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) raise<Error>("{}: nothing to run (empty argv)", spec.name);
  const std::string exe = resolve_exe(spec.argv[0]);
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Before the pipes: a path that cannot be opened leaves nothing open behind.
  ChildFds namespaces, cgroup_procs;
  open_each(spec.namespaces, O_RDONLY, spec.name, "namespace ", namespaces);
  open_each(spec.cgroup_procs, O_WRONLY, spec.name, "", cgroup_procs);
  int out[2], err[2], status[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(status, O_CLOEXEC) != 0) {
    raise<Error>("{}: pipe: {}", spec.name, std::strerror(errno));
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) raise<Error>("{}: fork: {}", spec.name, std::strerror(errno));
  if (pid == 0) {
    exec_child({exe.c_str(), argv.data(), envp.data(),
                spec.cwd.empty() ? nullptr : spec.cwd.c_str(), parent, devnull, out[1], err[1],
                status[1], namespaces.fds, cgroup_procs.fds});
  }
  ::setpgid(pid, pid);
  namespaces.close_all();
  cgroup_procs.close_all();
  ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status[1]);
  int child_errno = 0;
  const ssize_t n = ::read(status[0], &child_errno, sizeof(child_errno));
  ::close(status[0]);
  if (n == sizeof(child_errno)) {
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    ::close(err[0]);
    raise<Error>("{}: cannot start {}: {}", spec.name, exe, std::strerror(child_errno));
  }
  auto c = std::make_shared<Child>();
  c->spec = spec;
  c->pid = pid;
  c->info.name = spec.name;
  c->info.rank = spec.rank;
  c->info.pid = pid;
  c->pipes[0] = std::make_unique<boost::asio::posix::stream_descriptor>(io_, out[0]);
  c->pipes[1] = std::make_unique<boost::asio::posix::stream_descriptor>(io_, err[0]);
  children_[pid] = c;
  read_more(c, 0);
  read_more(c, 1);
  return pid;
}

void Supervisor::read_more(std::shared_ptr<Child> c, int which) {
  c->pipes[which]->async_read_some(
      boost::asio::buffer(c->buf[which]),
      [this, c, which](const boost::system::error_code& ec, size_t n) {
        auto emit = [&](std::string line) {
          int rank = c->spec.rank;
          std::string stream = which == 0 ? "stdout" : "stderr";
          if (c->spec.tag_output && line.size() > 3 && line[0] == '[') {
            // mpirun --tag-output: "[jobid,rank]<stdout>:text"
            const auto comma = line.find(',');
            const auto close = line.find(']');
            const auto lt = line.find('<', close);
            const auto gt = line.find(">:", lt);
            if (comma < close && close != std::string::npos && lt == close + 1 &&
                gt != std::string::npos) {
              rank = std::atoi(line.c_str() + comma + 1);
              stream = line.substr(lt + 1, gt - lt - 1);
              line = line.substr(gt + 2);
            }
          }
          if (c->spec.label_output) {
            // srun --label: "R: text", R right-aligned
            size_t i = line.find_first_not_of(' ');
            size_t j = i == std::string::npos ? i : line.find_first_not_of("0123456789", i);
            if (i != std::string::npos && j != std::string::npos && j > i && j < line.size() &&
                line.compare(j, 2, ": ") == 0) {
              rank = std::atoi(line.c_str() + i);
              line = line.substr(j + 2);
            }
          }
          if (on_line_) on_line_(rank, c->spec.name, stream, line);
        };
        if (n > 0) {
          std::string& p = c->partial[which];
          p.append(c->buf[which].data(), n);
          size_t start = 0;
          for (size_t nl; (nl = p.find('\n', start)) != std::string::npos; start = nl + 1) {
            emit(p.substr(start, nl - start));
          }
          p.erase(0, start);
        }
        if (ec) {
          if (!c->partial[which].empty()) emit(std::exchange(c->partial[which], ""));
          boost::system::error_code ignore;
          c->pipes[which]->close(ignore);
          if (--c->open_pipes == 0 && c->reaped && !c->delivered) {
            c->delivered = true;
            if (on_exit_) on_exit_(c->info);
            children_.erase(c->pid);
          }
          return;
        }
        read_more(c, which);
      });
}

void Supervisor::reap() {
  for (;;) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    auto it = children_.find(pid);
    if (it == children_.end()) continue;  // an orphaned descendant: reaped, nothing to report
    auto c = it->second;
    c->reaped = true;
    c->info.signaled = WIFSIGNALED(st);
    c->info.code = c->info.signaled ? WTERMSIG(st) : WEXITSTATUS(st);
    c->info.klass = classify_exit(c->info.signaled, c->info.code);
    c->info.by_harness = c->by_harness;
    if (c->open_pipes == 0) {
      c->delivered = true;
      if (on_exit_) on_exit_(c->info);
      children_.erase(it);
      continue;
    }
    // A grandchild may still hold the pipes: report the exit after a short drain at most.
    c->drain_timer = std::make_unique<boost::asio::steady_timer>(io_);
    c->drain_timer->expires_after(std::chrono::milliseconds(500));
    c->drain_timer->async_wait([this, c](const boost::system::error_code& ec) {
      if (ec || c->delivered) return;
      c->delivered = true;
      boost::system::error_code ignore;
      for (auto& p : c->pipes) p->close(ignore);
      if (on_exit_) on_exit_(c->info);
      children_.erase(c->pid);
    });
  }
}

bool Supervisor::signal(pid_t pid, int sig) {
  auto it = children_.find(pid);
  if (it == children_.end() || it->second->reaped) return false;
  return ::kill(-pid, sig) == 0 || ::kill(pid, sig) == 0;
}

bool Supervisor::signal_descendant(pid_t pid, int sig) {
  if (children_.count(pid)) return signal(pid, sig);
  if (!descendants_of(::getpid()).count(pid)) return false;
  return ::kill(pid, sig) == 0;
}

void Supervisor::mark_by_harness(pid_t pid) {
  auto it = children_.find(pid);
  if (it != children_.end()) it->second->by_harness = true;
}

int Supervisor::running() const {
  int n = 0;
  for (auto& [pid, c] : children_) n += c->reaped ? 0 : 1;
  return n;
}

bool Supervisor::is_running(pid_t pid) const {
  auto it = children_.find(pid);
  return it != children_.end() && !it->second->reaped;
}

std::vector<pid_t> Supervisor::pids() const {
  std::vector<pid_t> out;
  for (auto& [pid, c] : children_) {
    if (!c->reaped) out.push_back(pid);
  }
  return out;
}

void Supervisor::teardown(std::chrono::milliseconds grace) {
  auto pump = [&](std::chrono::milliseconds budget, auto done) {
    const auto until = std::chrono::steady_clock::now() + budget;
    io_.restart();
    while (!done() && std::chrono::steady_clock::now() < until) {
      io_.run_for(std::chrono::milliseconds(20));
      reap();
      io_.restart();
    }
  };
  for (auto& [pid, c] : children_) {
    if (c->reaped) continue;
    c->by_harness = true;
    ::kill(-pid, SIGCONT);  // a stopped group cannot act on TERM
    ::kill(-pid, SIGTERM);
  }
  pump(grace, [&] { return running() == 0; });
  for (auto& [pid, c] : children_) {
    if (!c->reaped) ::kill(-pid, SIGKILL);
  }
  for (pid_t d : descendants_of(::getpid())) ::kill(d, SIGKILL);
  pump(std::chrono::milliseconds(5000), [&] { return children_.empty(); });
  // Anything left (re-parented orphans): kill and reap.
  for (int round = 0; round < 50; ++round) {
    auto left = descendants_of(::getpid());
    if (left.empty()) break;
    for (pid_t d : left) ::kill(d, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
}

}  // namespace fl::harness
