// `faultline bench-recovery SUITE`: a suite's scenarios fault-free and with a recovery tool; the
// recovery's score.
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/score/bench.hpp"

namespace fl::cli {
namespace {

Handler setup_bench_recovery(CLI::App& sub) {
  auto o = std::make_shared<fl::harness::BenchRecoveryOptions>();
  add_suite_options(sub, o->suite, o->suite_options);
  sub.add_option("--policy", o->policy,
                 "Recovery policy or command (default: each scenario's recovery key)");
  return [o] { return fl::harness::bench_recovery(*o); };
}

}  // namespace

const Command& bench_recovery_command() {
  static const Command c{
      "bench-recovery",
      "Run a suite's scenarios fault-free and with a recovery tool; score the recovery",
      setup_bench_recovery};
  return c;
}

}  // namespace fl::cli
