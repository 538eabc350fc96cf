// Running a program and capturing its output (no shell: argv as given).
#pragma once

#include <string>
#include <vector>

namespace fl {

// Runs argv (PATH lookup, stdin /dev/null, stdout and stderr together) and waits; returns the
// output. Throws Error with the command, how it ended and its output when it fails.
std::string run_tool(const std::vector<std::string>& argv);

// Runs argv the same way but reports how it ended instead of throwing for a failure: `status`
// is the exit status, or 128 + the signal. Throws Error only when the program cannot start.
struct ToolOutcome {
  int status = 0;
  std::string output;
};
ToolOutcome run_tool_status(const std::vector<std::string>& argv);

}  // namespace fl
