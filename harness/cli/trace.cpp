// `faultline trace RUN_DIR`: the run's timeline as a Chrome trace (ui.perfetto.dev).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"

namespace fl::cli {
namespace {

struct TraceArgs {
  std::string dir, out;
};

Handler setup_trace(CLI::App& sub) {
  auto a = std::make_shared<TraceArgs>();
  sub.add_option("dir", a->dir, "Run directory")->required();
  sub.add_option("-o,--output", a->out, "Trace file (default: DIR/trace.json)");
  return [a] {
    std::printf("%s\n", fl::harness::write_trace(a->dir, a->out).c_str());
    return 0;
  };
}

}  // namespace

const Command& trace_command() {
  static const Command c{"trace",
                         "Write a run's timeline as a trace for ui.perfetto.dev / chrome://tracing",
                         setup_trace};
  return c;
}

}  // namespace fl::cli
