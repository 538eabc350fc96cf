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

}  // namespace fl::detect
