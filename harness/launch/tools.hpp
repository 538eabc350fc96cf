// Tools beside a run: detectors and recovery tools. The harness starts them once its control plane
// listens, tells them where it is through the environment, logs their output to RUN_DIR/tools/,
// and at the end announces `run_ending` and gives them a moment to post their last diagnoses.
#pragma once

#include <string>
#include <vector>

namespace fl::harness {

struct ToolCommand {
  std::string name;  // unique within the run: hang, comm, ..., recover, or the program's name
  std::vector<std::string> argv;
  bool recovery = false;  // may act on the run through Control
};

// The baseline detectors (harness/detectors/CMakeLists.txt), in leaderboard order.
const std::vector<std::string>& baseline_detectors();
// The recovery policies of fl-recover.
const std::vector<std::string>& recovery_policies();

// `detectors`: a baseline detector's name, "baseline" (all of them), or a command line (split on
// whitespace, run without a shell; a relative program is looked up on PATH). `recovery`: a policy
// of fl-recover or a command line ("" : none). Throws ConfigError for an empty command.
std::vector<ToolCommand> resolve_tools(const std::vector<std::string>& detectors,
                                       const std::string& recovery);

// The environment a tool gets on top of the harness's own: the control plane's address and
// secret (FAULTLINE_CONTROL_ADDR, FAULTLINE_CONTROL_SECRET), its name and the run directory.
std::vector<std::string> tool_env(const ToolCommand& t, const std::string& control_addr,
                                  const std::string& secret, const std::string& run_dir);

}  // namespace fl::harness
