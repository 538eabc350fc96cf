// faultline: the command line (`faultline --help`; docs/harness.md). Each subcommand is a file of
// this folder, listed in commands.cpp; this file parses, dispatches and turns usage errors into
// exit 2. `run`'s exit codes: 0 pass, 1 fail, 2 harness/input error (usage errors too), 3 unknown,
// 4 interrupted (SIGINT/SIGTERM).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/cli/command.hpp"
#include "harness/suite/build_info.hpp"

namespace {

void add_version_flag(CLI::App& app) {
  std::string v = fl::harness::version_text();
  v.pop_back();  // CLI11 ends the line itself
  app.set_version_flag("--version", v, "Print version, commit, build type, compiler, options");
}

// Usage errors exit 2 as every input error does (CLI11_PARSE would return CLI11's own codes).
// Empty: parsed, go on; else the exit code.
std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A mistyped command reads better named than as "a subcommand is required".
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' &&
        std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::fprintf(stderr, "faultline: '%s' is not a command (allowed: %s)\n", argv[1],
                   fmt::format("{}", fmt::join(names, ", ")).c_str());
      return 2;
    }
    std::fprintf(stderr, "faultline: %s (faultline --help, or COMMAND --help)\n", e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline: reproduce distributed deep-learning failures on purpose"};
  app.require_subcommand(1);
  add_version_flag(app);
  std::vector<std::pair<const CLI::App*, fl::cli::Handler>> handlers;
  for (const auto& c : fl::cli::commands()) {
    auto* sub = app.add_subcommand(c.name, c.help);
    handlers.emplace_back(sub, c.setup(*sub));
  }
  if (const auto code = parse(app, argc, argv)) return *code;
  for (const auto& [sub, handler] : handlers) {
    if (sub->parsed()) return fl::cli::run_handler(handler);
  }
  return 2;  // not reached: require_subcommand(1)
}
