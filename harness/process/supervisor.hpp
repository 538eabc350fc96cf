// Supervision of a run's processes with Boost.Asio: every child in its own process group with a
// parent-death signal, its stdout/stderr read line by line (timestamped into the rank's log and
// the history), its end classified (exit code, signal, crash), and a teardown that always kills
// and reaps everything the run started — including orphaned grandchildren, which come back to
// the harness because it is a child subreaper.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

// Asio stays in supervisor.cpp: the many files that start or signal processes do not parse it.
namespace boost::asio {
class io_context;
}

namespace fl::harness {

struct ProcessSpec {
  std::string name;  // "rank 3", "mpirun", "ompi-server"
  int rank = -1;     // -1: not a rank
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value, the whole environment
  std::string cwd;
  bool tag_output = false;    // mpirun --tag-output: lines carry "[1,R]<stdout>:" (R = rank)
  bool label_output = false;  // srun --label: lines carry "R: " (R = task = rank)
  // Namespaces the child enters before exec (/proc/PID/ns/net, /proc/PID/ns/mnt of a holder).
  std::vector<std::string> namespaces;
  // cgroup.procs files of the cgroups the child puts itself in before exec (one per controller
  // hierarchy: memory, cpu, ...).
  std::vector<std::string> cgroup_procs;
};

struct ExitInfo {
  std::string name;
  int rank = -1;
  pid_t pid = 0;
  bool signaled = false;
  int code = 0;             // exit status, or the signal number
  std::string klass;        // ok, error, crash, signal (set by classify)
  bool by_harness = false;  // killed during teardown or by a control action
};

// ok (exit 0), error (non-zero exit), crash (SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT), signal (any
// other signal).
std::string classify_exit(bool signaled, int code);
std::string signal_name(int sig);
// An exit's fields as the history records them (rank_exit, tool_exit, process_exit): pid, class,
// code, signaled, by_harness, and the signal's name when there was one.
nlohmann::json exit_fields(const ExitInfo& x);
// "KILL" / "SIGKILL" / "9" -> 9; -1 if unknown.
int signal_number(const std::string& name);

class Supervisor {
 public:
  using LineFn = std::function<void(int rank, const std::string& name, const std::string& stream,
                                    const std::string& line)>;
  using ExitFn = std::function<void(const ExitInfo&)>;

  Supervisor(boost::asio::io_context& io, LineFn on_line, ExitFn on_exit);
  ~Supervisor();

  // fork/exec; returns the pid. Throws Error when the exec fails (the child reports errno).
  pid_t spawn(const ProcessSpec& spec);
  // Signals the process group of a process this supervisor spawned; false if it is gone.
  bool signal(pid_t pid, int sig);
  // Signals a pid only if it descends from this harness (a worker under mpirun).
  bool signal_descendant(pid_t pid, int sig);
  int running() const;
  bool is_running(pid_t pid) const;
  std::vector<pid_t> pids() const;
  // TERM to every group, `grace` to exit, then KILL to groups and every remaining descendant;
  // reaps them all. Blocks (runs the io_context) until done.
  void teardown(std::chrono::milliseconds grace);
  // Marks the next exit of `pid` as caused by the harness.
  void mark_by_harness(pid_t pid);

 private:
  struct Child;
  struct Sigchld;  // the SIGCHLD watch (a boost::asio::signal_set)
  void reap();
  void rearm(int);
  void read_more(std::shared_ptr<Child> c, int which);

  boost::asio::io_context& io_;
  std::unique_ptr<Sigchld> sigchld_;
  LineFn on_line_;
  ExitFn on_exit_;
  std::map<pid_t, std::shared_ptr<Child>> children_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fl::harness
