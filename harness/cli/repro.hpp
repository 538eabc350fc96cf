// `faultline repro` as a call: other subcommands (triage --run) run a scenario file and its fix
// through the same code, in process.
#pragma once

#include <string>

namespace fl::cli {

struct ReproSummary {
  bool reproduced = false, verified = false;
  int exit_code = 2;  // as `faultline repro`: 0 reproduced and fixed, 1 not, 2 harness error
};

// Runs `faultline repro SCENARIO` (results under results/runs); quiet: the final lines only.
// Throws as the command does (a scenario that does not load).
ReproSummary repro_file(const std::string& scenario, bool quiet);

}  // namespace fl::cli
