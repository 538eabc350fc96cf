// `faultline repro` as a call: other subcommands (triage --run) run a scenario file and its fix
// through the same code, in process.
#pragma once

#include <string>

namespace fl::cli {

struct ReproSummary {
  bool reproduced = false, verified = false;
  // A run ended by SIGINT/SIGTERM (verdict `interrupted`): the fix variant does not start after
  // an interrupted faulty run, and the exit code is 4.
  bool interrupted = false;
  // as `faultline repro`: 0 reproduced and fixed, 1 not, 2 harness error, 4 interrupted
  int exit_code = 2;
};

// Runs `faultline repro SCENARIO` (results under results/runs); quiet: the final lines only.
// Throws as the command does (a scenario that does not load).
ReproSummary repro_file(const std::string& scenario, bool quiet);

}  // namespace fl::cli
