// Runs beside a run (run_side.cpp): the scenario's preparation run (no faults, must complete;
// its checkpoints become this run's), its after_prepare command (a project tool with its
// arguments, in the run directory, no shell) and the baseline oracle's reference run (a
// fault-free `faultline run` of the reference scenario, started with the ranks and judged with
// them, so both see the same load on the host).
#pragma once

#include <sys/types.h>

#include <string>

namespace fl {
class DirFd;
}

namespace fl::harness {

class EventLoop;
class History;
class Supervisor;
struct ExitInfo;
struct RunOptions;
struct Scenario;

class SideRuns {
 public:
  SideRuns(const Scenario& s, const RunOptions& o, const std::string& dir, const DirFd& run_dir,
           History& hist, EventLoop& loop)
      : s_(s), o_(o), dir_(dir), run_dir_(run_dir), hist_(hist), loop_(loop) {}

  // prepare.yaml in RUN_DIR/prepare, then after_prepare; Error when either fails.
  void run_preparation();
  // baseline.yaml: starts the reference run and waits (up to 120 s, running the loop, until
  // `stopping`) for its ranks to launch, so that both runs' ranks share the same window.
  void start_baseline(Supervisor& sup, const bool& stopping);
  // Whether `x` is the reference run's end (recorded).
  bool on_exit(const ExitInfo& x);
  // Waits for the reference run (unless this run was `interrupted`) and records what the
  // baseline oracle compares.
  void finish_baseline(Supervisor& sup, bool interrupted);

 private:
  void run_after_prepare();

  const Scenario& s_;
  const RunOptions& o_;
  const std::string& dir_;
  const DirFd& run_dir_;
  History& hist_;
  EventLoop& loop_;
  pid_t baseline_pid_ = 0;
  bool baseline_exited_ = false;
  double baseline_wait_s_ = 0;
};

}  // namespace fl::harness
