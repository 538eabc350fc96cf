// Waiting for ranks asked to dump (flight recorder on SIGUSR2, Python stacks on SIGUSR1): each
// signalled rank's file is polled until it changes, for a bounded time, so a rank that cannot
// run (stopped, in uninterruptible sleep) is reported missing instead of holding the run.
#pragma once

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fl::harness {

// Whether process `pid` has a handler for `sig` now (the SigCgt mask of /proc/PID/status): a
// process that announced it takes a dump signal may have given the signal back to its default
// action since, which would end it.
inline bool catches_signal(int pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = 0;
    std::istringstream(line.substr(7)) >> std::hex >> mask;
    return sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1ULL) != 0;
  }
  return false;
}

// `waiting` holds {rank, path, before}; `changed(path, before)` says the file differs from its
// state before the signal. Ranks that dumped go to `dumped`; those still in `waiting` after
// `limit` are returned (missing).
template <class Pending, class Changed>
std::vector<int> wait_for_dumps(std::vector<Pending>& waiting, std::vector<int>& dumped,
                                Changed changed,
                                std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!waiting.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (changed(it->path, it->before)) {
        dumped.push_back(it->rank);
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<int> missing;
  for (const auto& p : waiting) missing.push_back(p.rank);
  return missing;
}

}  // namespace fl::harness
