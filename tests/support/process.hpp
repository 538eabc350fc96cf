// Test support: run a command (argv, no shell) with extra environment, capture stdout+stderr,
// enforce a deadline, and find free loopback ports.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/scratch.hpp"

namespace fl::test {

struct ProcessResult {
  int exit_code = -1;  // exit status, or 128+signal
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved
  double seconds = 0;
};

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::seconds timeout = std::chrono::seconds(120));

// fresh_test_dir(what, test name): scratch.hpp.

// A loopback TCP port that was free a moment ago.
int free_port();

// mpirun with the flags every test launch needs (root allowed, oversubscribe, quiet).
std::vector<std::string> mpirun_prefix(int ranks);

}  // namespace fl::test
