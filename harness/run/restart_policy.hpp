// What a run does when every rank of an incarnation has ended: restart the job (a restart_job
// request, or a fault that asks for one), give an attached recovery tool time to act on a
// failure, keep waiting for that tool, or end. Only the decision lives here; the runner carries
// it out (launch, timer, stop). Internal to the harness.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace fl::harness {

class RestartPolicy {
 public:
  enum class Next {
    kRestart,        // launch every rank again from Decision::from ("" = from step 0)
    kAwaitRecovery,  // start the recovery tool's window; the run goes on without ranks
    kWait,           // the window is already open: nothing to do now
    kEnd,            // the run is over
  };
  struct Decision {
    Next next = Next::kEnd;
    std::string from;
  };

  // A recovery tool is attached to the run (docs/detectors.md): a failure is left to it.
  void attach_recovery() { recovery_ = true; }
  bool recovery_attached() const { return recovery_; }

  // restart_job was accepted: the job restarts from `from` once every rank has ended.
  void request(std::string from) { pending_ = std::move(from); }
  bool pending() const { return pending_.has_value(); }

  // A rank of this incarnation ended on its own with an error.
  void rank_failed() { failed_ = true; }

  // Every rank has ended. `stopping`: the run is being stopped (nothing restarts). When nothing
  // is pending and the run is not stopping, `fault_asks_restart` is asked (the faults `at: exit`
  // act then); true restarts from `checkpoints`.
  Decision all_ranks_ended(bool stopping, const std::function<bool()>& fault_asks_restart,
                           const std::string& checkpoints);

  int restarts() const { return restarts_; }
  bool awaiting_recovery() const { return awaiting_; }

 private:
  std::optional<std::string> pending_;
  bool recovery_ = false;
  bool failed_ = false;    // in the current incarnation
  bool awaiting_ = false;  // the recovery window is open
  int restarts_ = 0;
};

}  // namespace fl::harness
