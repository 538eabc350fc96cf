// The shared main of the baseline tools: parse the command line, connect, follow the run.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>

#include "harness/detectors/client.hpp"

namespace fl::detect {

// `body` runs once the command line is parsed and the tool is connected; exceptions end the
// tool with status 2 and the message on stderr.
inline int tool_main(CLI::App& app, int argc, char** argv, const char* name,
                     const std::function<void(Tool&)>& body) {
  std::string control;
  app.add_option("--control", control, "Control-plane address (default: FAULTLINE_CONTROL_ADDR)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    Tool tool(name, control);
    body(tool);
    std::printf("%s: %d diagnosis(es) posted\n", tool.name().c_str(), tool.reports());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  }
}

// The main of a tool written as a class: once the command line has filled `options`,
// `T(tool, options)` sees every event in its on_event and, when it has one, the clock in its
// on_tick (Tool::run).
template <class T, class Options>
int run_tool(CLI::App& app, int argc, char** argv, const char* name, const Options& options) {
  return tool_main(app, argc, argv, name, [&](Tool& tool) {
    T t(tool, options);
    auto on_event = [&](const Event& e) { t.on_event(e); };
    if constexpr (requires(int64_t now) { t.on_tick(now); }) {
      tool.run(on_event, [&](int64_t now) { t.on_tick(now); });
    } else {
      tool.run(on_event);
    }
  });
}

}  // namespace fl::detect
