// On-demand flight-recorder dumps, when the harness declares a hang and when a tool asks through
// Control (dump_flight_recorder): every rank that announced it takes SIGUSR2 (the file
// fr_dump_on_signal in its rank directory, holding its pid) gets the signal and writes its dumps,
// as PyTorch's dump-on-signal does; the harness waits a bounded time for them (before it tears
// the run down, or before it answers). A stopped (SIGSTOPped) rank cannot dump: it is left
// alone, and its peers' dumps show what it never started.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "harness/history/history.hpp"
#include "harness/run/dump_wait.hpp"
#include "harness/run/rank_dumps.hpp"

namespace fl::harness {

namespace {

// /proc/<pid>/stat: the state letter and the parent pid ('?' and 0 when the process is gone).
std::pair<char, pid_t> proc_state(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return {'?', 0};
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 4 >= line.size()) return {'?', 0};
  char state = line[close + 2];
  pid_t ppid = 0;
  try {
    ppid = static_cast<pid_t>(std::stol(line.substr(close + 4)));
  } catch (const std::exception&) {
    return {'?', 0};
  }
  return {state, ppid};
}

bool is_my_descendant(pid_t pid) {
  const pid_t me = ::getpid();
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    const pid_t parent = proc_state(pid).second;
    if (parent == me) return true;
    pid = parent;
  }
  return false;
}

// Identity of a dump file (a rename gives it a new inode); {0, 0} when there is none.
std::pair<ino_t, int64_t> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {st.st_ino, static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

}  // namespace

FrDumps request_fr_dumps(const DumpTargets& t, const std::string& reason, int rank) {
  struct Pending {
    int rank;
    std::string path;
    std::pair<ino_t, int64_t> before;
  };
  std::vector<Pending> waiting;
  FrDumps out;
  auto& [signalled, dumped, frozen, missing, not_taking] = out;
  for (int r = 0; r < t.ranks; ++r) {
    if (rank >= 0 && r != rank) continue;
    const std::string rdir = fmt::format("{}/ranks/rank{}", t.dir, r);
    std::ifstream in(rdir + "/fr_dump_on_signal");
    pid_t pid = 0;
    const char state =
        (in >> pid) && pid > 1 && is_my_descendant(pid) ? proc_state(pid).first : '?';
    if (state == '?' || state == 'Z' || state == 'X' ||
        (state != 'T' && state != 't' && !catches_signal(pid, SIGUSR2))) {
      not_taking.push_back(r);  // never announced, gone, or its handler given back
      continue;
    }
    if (state == 'T' || state == 't') {
      // A frozen rank cannot dump now; signalled, it would dump at the teardown's SIGCONT,
      // showing a later state than the hang's.
      frozen.push_back(r);
      continue;
    }
    const std::string path = fmt::format("{}/nccl_trace_rank_{}", rdir, r);
    const auto before = file_id(path);
    if (::kill(pid, SIGUSR2) != 0) continue;
    signalled.push_back(r);
    waiting.push_back({r, path, before});
  }
  // Bounded: a rank busy in a kernel still dumps from its watcher thread within milliseconds.
  missing = wait_for_dumps(waiting, dumped, [](const std::string& path, const auto& before) {
    return file_id(path) != before && file_id(path).first != 0;
  });
  std::sort(dumped.begin(), dumped.end());  // in the order they were seen: rank order instead
  t.hist.harness("flight_recorder_dump", {{"reason", reason},
                                          {"signalled", signalled},
                                          {"dumped", dumped},
                                          {"frozen", frozen},
                                          {"missing", missing},
                                          {"not_taking", not_taking}});
  return out;
}

}  // namespace fl::harness
