// workload.kind: command, the runner's side (issue 21): the probe's per-rank files go into the
// history as they grow, and a probed command that ends before its first event, or stays silent
// for workload.report_timeout_s, is a harness error naming the rank and the command
// (run_command.cpp). The ranks themselves start in launch_command.cpp. torchrun's conventions
// (error files, how each worker under one torchrun ended) are read here too (torchelastic.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fl::harness {

class History;
class Launcher;
class ProbeIngest;
struct ExitInfo;
struct Scenario;

class CommandProbe {
 public:
  // Follows the history through a listener once launched: it must outlive `hist`.
  CommandProbe(const Scenario& s, const std::string& dir, History& hist, const Launcher& launcher);
  ~CommandProbe();

  // Before every launch: no rank has reported since.
  void begin_launch();
  // A rank's (or, rank -1, the launcher's) latest output line, for the error that names it.
  void note_line(int rank, const std::string& line);
  // A rank of a probed command that ended before its first event: Error (the command is wrong,
  // not a symptom of the scenario's fault).
  void check_exit(const ExitInfo& x, bool stopping);
  // Every tick: new probe lines into the history; Error for a probed rank of `running` silent
  // for report_timeout_s since its launch. Returns the ranks (launch: once) whose process is
  // gone after it reported an error (a worker_gone event each): a launcher may outlive them by
  // minutes (torchrun's agent waits up to 300 s in its exit barrier for an agent it cannot reach),
  // so the runner gives them fail-fast's grace as it does a rank's own failure.
  std::vector<int> poll(bool stopping, const std::set<int>& running);
  // At the end: what the probe wrote until then.
  void final_poll();
  // After the job (once per launch): each rank's TORCHELASTIC_ERROR_FILE into the history as a
  // worker_error event (refused ones as error_file_refused), and under launch: once torchrun's
  // own file (the first failure as it saw it) as torchrun_error.
  void read_error_files();
  // launch: once, a rank that sent no exit event when the launcher ended: how it ended, into
  // `ex` (class, code, signaled, ended_by, torn_down), from the harness's own signal to the
  // rank's pid, torchrun's "closing signal" line for that pid and the rank's error file.
  void explain_end(int rank, nlohmann::json& ex);

 private:
  bool rank_reported(int rank);
  std::map<int, int64_t> gone_after_error(const std::set<int>& running);  // rank -> pid
  std::string command_shown(int rank);  // the command a rank was launched with (its launch event)

  const Scenario& s_;
  const std::string dir_;
  History& hist_;
  const Launcher& launcher_;
  std::unique_ptr<ProbeIngest> probe_;
  std::mutex mu_;
  std::set<int> reported_;                // under mu_: ranks that sent an event since the launch
  std::set<int> errored_;                 // under mu_: ranks that sent an error event
  std::map<int, int64_t> hello_pid_;      // under mu_: each rank's pid, as its hello said
  std::set<int> gone_;                    // under mu_: ranks found gone (worker_gone)
  std::map<int, std::string> last_line_;  // each rank's last output line (-1: the launcher)
  int64_t launched_ns_ = 0;
  bool errors_read_ = false;
};

}  // namespace fl::harness
