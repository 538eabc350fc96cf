#include "tests/support/train_run.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fl::test {

namespace fs = std::filesystem;

TrainRun run_train(const std::string& binary, int ranks, std::vector<std::string> args, int steps,
                   std::map<std::string, std::string> env) {
  static int counter = 0;
  fs::path metrics = fs::temp_directory_path() / ("faultline-train-" + std::to_string(::getpid()) +
                                                  "-" + std::to_string(counter++) + ".jsonl");
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
  env.emplace("FAULTLINE_FLIGHT_RECORDER_DIR", fs::temp_directory_path().string());
  r.proc = run_process(argv, env);
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) r.steps.push_back(nlohmann::json::parse(line));
  fs::remove(metrics);
  return r;
}

}  // namespace fl::test
