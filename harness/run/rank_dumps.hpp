// Evidence asked of a run's ranks, each at most 2 s: a flight-recorder dump (SIGUSR2; when the
// hang watchdog stops the run and by the dump_flight_recorder control action; run_frdump.cpp) and
// the threads of every live rank with the Python stacks of ranks whose probe takes SIGUSR1 (when
// the hang watchdog or the run timeout gives up on the job; run_stacks.cpp).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace fl::harness {

class History;

// The ranks asked: 0..ranks-1, their files under DIR/ranks/rankN, their processes (pid_of: 0 for
// none); each request is recorded in `hist`.
struct DumpTargets {
  int ranks = 0;
  std::string dir;
  std::function<pid_t(int rank)> pid_of;
  History& hist;
};

struct FrDumps {
  std::vector<int> signalled, dumped, frozen, missing;
  std::vector<int> not_taking;  // no live process that takes SIGUSR2 for this rank
};

// Every live rank (or `rank` alone) is asked for a flight-recorder dump; recorded as a
// `flight_recorder_dump` event with `reason`.
FrDumps request_fr_dumps(const DumpTargets& t, const std::string& reason, int rank = -1);

// Threads (threads.txt) and Python stacks (stacks.txt) of every live rank; a `stack_dump` event
// with `why` when there was any.
void request_stack_dumps(const DumpTargets& t, const std::string& why);

}  // namespace fl::harness
