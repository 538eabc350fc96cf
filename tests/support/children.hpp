// Forked children for tests: a function run as another user of the machine (nobody), and
// functions run in several processes released at the same moment (races between processes).
#pragma once

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

namespace fl::test {

// What waitpid's status says: the exit code, or 128 + the signal that ended the process.
inline int exit_status(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Runs `f` as uid/gid 65534 in a forked child (raw system calls only); returns its exit status
// (90: the child could not become that user).
inline int as_nobody(const std::function<int()>& f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(90);
    _exit(f());
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return exit_status(st);
}

// Runs work(0) ... work(n - 1), each in a forked child, all released together (the pipe they
// wait on closes). A child exits 0 when its work returned, 1 when it threw. The children's exit
// statuses in order; empty when the pipe could not be made.
inline std::vector<int> race_children(int n, const std::function<void(int)>& work) {
  int go[2];
  if (::pipe(go) != 0) return {};
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char b;
      if (::read(go[0], &b, 1) < 0) ::_exit(3);
      try {
        work(i);
        ::_exit(0);
      } catch (...) {
        ::_exit(1);
      }
    }
    kids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // EOF releases them all
  std::vector<int> statuses;
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    statuses.push_back(exit_status(st));
  }
  return statuses;
}

}  // namespace fl::test
