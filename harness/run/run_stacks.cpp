// Stacks of a job the harness gives up on (issue 21): when the hang watchdog stops a run or the
// run timeout ends it, the harness leaves evidence of where each live rank was before the
// teardown kills it. Every rank's threads (name, state, wchan, kernel stack where readable) go to
// ranks/rankN/threads.txt; a rank whose probe announced a stack handler (the Python probe's
// stacks_on_signal, holding its pid) gets SIGUSR1 and appends every thread's Python stack to
// ranks/rankN/stacks.txt, waited for at most 2 s. Nothing here enters a verdict.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "harness/history/history.hpp"
#include "harness/run/dump_wait.hpp"
#include "harness/run/rank_dumps.hpp"

namespace fl::harness {

namespace {

std::string read_text(const std::string& path, size_t limit = 4096) {
  std::ifstream in(path);
  std::string s(limit, '\0');
  in.read(s.data(), static_cast<std::streamsize>(limit));
  s.resize(static_cast<size_t>(in.gcount()));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// The state letter and parent of a task from its stat file ('?' and 0 when it is gone).
std::pair<char, pid_t> task_state(const std::string& stat_path) {
  const std::string line = read_text(stat_path);
  const auto close = line.rfind(')');  // the name may hold spaces and parentheses
  if (close == std::string::npos || close + 4 >= line.size()) return {'?', 0};
  return {line[close + 2], static_cast<pid_t>(std::atoi(line.c_str() + close + 4))};
}

bool descends_from_me(pid_t pid) {
  const pid_t me = ::getpid();
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    const pid_t parent = task_state(fmt::format("/proc/{}/stat", pid)).second;
    if (parent == me) return true;
    pid = parent;
  }
  return false;
}

// One line per thread of `pid`, its kernel stack indented below it when readable.
std::string threads_of(pid_t pid) {
  std::ostringstream out;
  const std::string base = fmt::format("/proc/{}/task", pid);
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return "";
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string t = base + "/" + e->d_name;
    out << fmt::format("tid {} {} state {} wchan {}\n", e->d_name, read_text(t + "/comm"),
                       task_state(t + "/stat").first, read_text(t + "/wchan"));
    std::istringstream stack(read_text(t + "/stack", 16384));
    for (std::string line; std::getline(stack, line);) out << "    " << line << "\n";
  }
  ::closedir(d);
  return out.str();
}

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

}  // namespace

void request_stack_dumps(const DumpTargets& t, const std::string& why) {
  struct Pending {
    int rank;
    std::string path;
    off_t before;
  };
  std::vector<Pending> waiting;
  std::vector<int> threads, signalled, dumped;
  const std::string when =
      fmt::format("== {} (+{:.3f}s)\n", why, static_cast<double>(t.hist.now_ns()) / 1e9);
  for (int r = 0; r < t.ranks; ++r) {
    const std::string rdir = fmt::format("{}/ranks/rank{}", t.dir, r);
    const pid_t pid = t.pid_of(r);
    if (pid > 1 && descends_from_me(pid)) {
      if (const std::string text = threads_of(pid); !text.empty()) {
        std::ofstream(rdir + "/threads.txt", std::ios::app)
            << when << fmt::format("pid {}\n", pid) << text;
        threads.push_back(r);
      }
    }
    const std::string announced = read_text(rdir + "/stacks_on_signal");
    const pid_t py = static_cast<pid_t>(std::atoi(announced.c_str()));
    if (py <= 1 || !descends_from_me(py)) continue;
    const char state = task_state(fmt::format("/proc/{}/stat", py)).first;
    if (state == '?' || state == 'Z' || state == 'X' || state == 'T' || state == 't') continue;
    if (!catches_signal(py, SIGUSR1)) continue;  // its handler gone: the signal would end it
    const std::string path = rdir + "/stacks.txt";
    std::ofstream(path, std::ios::app) << when;
    const off_t before = file_size(path);
    if (::kill(py, SIGUSR1) != 0) continue;
    signalled.push_back(r);
    waiting.push_back({r, path, before});
  }
  // The handler writes from the signal itself (faulthandler): a rank blocked in C++ still dumps
  // at once; only a process that cannot run (stopped, in uninterruptible sleep) misses it.
  const std::vector<int> missing = wait_for_dumps(
      waiting, dumped,
      [](const std::string& path, const auto& before) { return file_size(path) > before; });
  if (threads.empty() && signalled.empty()) return;
  t.hist.harness("stack_dump", {{"reason", why},
                                {"threads", threads},
                                {"signalled", signalled},
                                {"dumped", dumped},
                                {"missing", missing}});
}

}  // namespace fl::harness
