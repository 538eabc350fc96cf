// `faultline triage [FILE]`: rank symptoms and root causes for an issue's text or log
// (harness/triage/, docs/triage.md).
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/triage/cli.hpp"

namespace fl::cli {
namespace {

Handler setup_triage(CLI::App& sub) {
  auto triage = std::make_shared<const fl::triage::Command>(sub);
  return [triage] { return triage->run(); };
}

}  // namespace

const Command& triage_command() {
  static const Command c{"triage", "Rank symptoms and root causes for an issue's text or log",
                         setup_triage};
  return c;
}

}  // namespace fl::cli
