// Running a program and capturing its output (no shell: argv as given).
#pragma once

#include <string>
#include <vector>

namespace fl {

// Runs argv (PATH lookup, stdin /dev/null, stdout and stderr together) and waits; returns the
// output. Throws Error with the command, how it ended and its output when it fails.
std::string run_tool(const std::vector<std::string>& argv);

}  // namespace fl
