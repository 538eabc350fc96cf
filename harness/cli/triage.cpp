// `faultline triage [FILE]`: rank symptoms and root causes for an issue's text or log, and draft
// a scenario (harness/triage/, docs/triage.md); --run goes through `repro`'s own code.
#include <cstdio>
#include <exception>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/repro.hpp"
#include "harness/triage/cli.hpp"

namespace fl::cli {
namespace {

fl::triage::ReproOutcome repro_outcome(const std::string& file, bool quiet) {
  try {
    const ReproSummary s = repro_file(file, quiet);
    return {s.reproduced, s.verified, s.interrupted, s.exit_code};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "faultline repro: %s\n", e.what());
    return {};
  }
}

Handler setup_triage(CLI::App& sub) {
  auto triage = std::make_shared<fl::triage::Command>(sub);
  triage->set_repro(repro_outcome);
  return [triage] { return triage->run(); };
}

}  // namespace

const Command& triage_command() {
  static const Command c{"triage", "Rank symptoms and root causes for an issue's text or log",
                         setup_triage};
  return c;
}

}  // namespace fl::cli
