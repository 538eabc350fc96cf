// `faultline agent`: a multi-host run's per-host agent, started by the harness on each host
// (docs/cluster.md).
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/agent/agent.hpp"
#include "harness/cli/command.hpp"

namespace fl::cli {
namespace {

Handler setup_agent(CLI::App& sub) {
  auto o = std::make_shared<fl::harness::AgentOptions>();
  sub.add_option("--control", o->control, "The run's control-plane address")->required();
  sub.add_option("--host", o->host, "This host's name in topology.hosts")->required();
  sub.add_option("--run-dir", o->run_dir, "The run directory")->required();
  sub.add_flag("--allow-shared-results", o->allow_shared_results,
               "Accept a run directory above which another user can write (the harness passes "
               "it on when it was given it)");
  return [o] { return fl::harness::run_agent(*o); };
}

}  // namespace

const Command& agent_command() {
  static const Command c{
      "agent", "A multi-host run's per-host agent (the harness starts it; docs/cluster.md)",
      setup_agent};
  return c;
}

}  // namespace fl::cli
