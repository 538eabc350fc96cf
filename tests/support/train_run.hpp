// Test support: run fl-train under mpirun and read back its per-step metrics (JSON lines).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::test {

struct TrainRun {
  ProcessResult proc;
  std::vector<nlohmann::json> steps;
};

// `binary` on `ranks` ranks with `args`, --steps `steps` and a metrics file; a free MASTER_PORT,
// a 60 s comm deadline and flight-recorder dumps in the run's own folder,
// <temp>/faultline-train-<pid>/run-<n> (removed when the process exits), unless `env` says
// otherwise.
TrainRun run_train(const std::string& binary, int ranks, std::vector<std::string> args, int steps,
                   std::map<std::string, std::string> env = {});

}  // namespace fl::test
