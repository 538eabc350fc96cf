// The subcommand list. The order is the order of `faultline --help` and of the "allowed:" list a
// mistyped command gets.
#include "harness/cli/command.hpp"

#define FAULTLINE_COMMANDS(X) \
  X(settings)                 \
  X(sites)                    \
  X(run)                      \
  X(validate)                 \
  X(verdict)                  \
  X(control)                  \
  X(agent)                    \
  X(replay)                   \
  X(catalog)                  \
  X(suite)                    \
  X(score)                    \
  X(report)                   \
  X(trace)                    \
  X(metrics)                  \
  X(diff)                     \
  X(merge)                    \
  X(bench_detectors)          \
  X(bench_recovery)           \
  X(repro)                    \
  X(keys)                     \
  X(new)                      \
  X(clean)                    \
  X(campaign)                 \
  X(shrink)                   \
  X(triage)                   \
  X(status)                   \
  X(export)                   \
  X(soak)

namespace fl::cli {

#define FAULTLINE_DECLARE_COMMAND(name) const Command& name##_command();
FAULTLINE_COMMANDS(FAULTLINE_DECLARE_COMMAND)
#undef FAULTLINE_DECLARE_COMMAND

const std::vector<Command>& commands() {
#define FAULTLINE_LIST_COMMAND(name) name##_command(),
  static const std::vector<Command> all = {FAULTLINE_COMMANDS(FAULTLINE_LIST_COMMAND)};
#undef FAULTLINE_LIST_COMMAND
  return all;
}

}  // namespace fl::cli
