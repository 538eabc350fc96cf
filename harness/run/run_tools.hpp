// The tools the harness starts beside a run (docs/detectors.md): the scenario's `detectors:` and
// `recovery:` and those of the command line, each a process of the run's supervisor with the
// control plane's address and secret in its environment; their output goes to RUN_DIR/tools, not
// the history (a detector must not read another's). At the end they hear `run_ending` and get up
// to 3 s to post what they still have.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "harness/launch/tools.hpp"

namespace fl::harness {

class EventLoop;
class History;
class RestartPolicy;
class Supervisor;
struct ExitInfo;
struct RunOptions;
struct Scenario;

class RunTools {
 public:
  RunTools(const std::string& dir, History& hist) : dir_(dir), hist_(hist) {}

  // Resolves and starts them; a recovery tool attaches to `restart`.
  void start(const Scenario& s, const RunOptions& o, Supervisor& sup, RestartPolicy& restart,
             const std::string& control_addr, const std::string& secret);
  // A tool's exit, recorded as `tool_exit`; false when `x` is not a tool's.
  bool on_exit(const ExitInfo& x);
  // The run is over: `run_ending`, then up to 3 s on `loop` for them to post and end.
  void drain(EventLoop& loop, Supervisor& sup);

  bool running() const { return !pids_.empty(); }
  const std::vector<ToolCommand>& tools() const { return tools_; }

 private:
  const std::string dir_;
  History& hist_;
  std::vector<ToolCommand> tools_;
  std::map<pid_t, std::string> pids_;  // running tools
};

}  // namespace fl::harness
