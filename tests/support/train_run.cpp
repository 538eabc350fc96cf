#include "tests/support/train_run.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fl::test {

namespace fs = std::filesystem;

namespace {

// A folder for each run of this process, under one removed when the process exits: the run's
// metrics file and its ranks' flight-recorder dumps (flight_recorder_rank<N>.json).
fs::path next_run_dir() {
  static const fs::path base = removed_at_exit(fs::temp_directory_path() /
                                               ("faultline-train-" + std::to_string(::getpid())));
  static int counter = 0;
  const fs::path d = base / ("run-" + std::to_string(counter++));
  fs::create_directories(d);
  return d;
}

}  // namespace

TrainRun run_train(const std::string& binary, int ranks, std::vector<std::string> args, int steps,
                   std::map<std::string, std::string> env) {
  const fs::path dir = next_run_dir();
  const fs::path metrics = dir / "metrics.jsonl";
  auto argv = mpirun_prefix(ranks);
  argv.push_back(binary);
  for (auto& a : args) argv.push_back(a);
  for (auto& a :
       std::vector<std::string>{"--steps", std::to_string(steps), "--metrics", metrics.string()}) {
    argv.push_back(a);
  }
  TrainRun r;
  env.emplace("MASTER_PORT", std::to_string(free_port()));
  env.emplace("FAULTLINE_COMM_TIMEOUT_MS", "60000");
  env.emplace("FAULTLINE_FLIGHT_RECORDER_DIR", dir.string());
  r.proc = run_process(argv, env);
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) r.steps.push_back(nlohmann::json::parse(line));
  fs::remove(metrics);
  return r;
}

}  // namespace fl::test
