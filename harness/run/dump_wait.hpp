// Waiting for ranks asked to dump (flight recorder on SIGUSR2, Python stacks on SIGUSR1): each
// signalled rank's file is polled until it changes, for a bounded time, so a rank that cannot
// run (stopped, in uninterruptible sleep) is reported missing instead of holding the run.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace fl::harness {

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
