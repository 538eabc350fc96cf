// The subcommands of `faultline`. Each lives in its own file here (run.cpp, suite.cpp, ...) and
// is one Command: its name, its one-line help, and setup(), which adds its options to the CLI11
// subcommand main.cpp made for it and returns what to run when the user chose it. A new
// subcommand: its file, its name in commands.cpp's list, the file in harness/CMakeLists.txt.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace fl::cli {

// Runs a parsed subcommand; its exit code. Errors travel as exceptions: main.cpp maps them to
// exit 2 with one line (errors.cpp).
using Handler = std::function<int()>;

struct Command {
  std::string name;
  std::string help;
  // Binds the subcommand's options to state the returned handler owns.
  Handler (*setup)(CLI::App& sub);
};

// Every subcommand, in the order `faultline --help` lists them (commands.cpp).
const std::vector<Command>& commands();

// Runs `handler`, mapping what it throws to exit 2 and one line on stderr ("faultline: ...").
int run_handler(const Handler& handler);

}  // namespace fl::cli
