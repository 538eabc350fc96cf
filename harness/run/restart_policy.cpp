#include "harness/run/restart_policy.hpp"

namespace fl::harness {

RestartPolicy::Decision RestartPolicy::all_ranks_ended(
    bool stopping, const std::function<bool()>& fault_asks_restart,
    const std::string& checkpoints) {
  if (!stopping && !pending_ && fault_asks_restart && fault_asks_restart()) {
    pending_ = checkpoints;
  }
  if (pending_ && !stopping) {
    Decision d{Next::kRestart, *pending_};
    pending_.reset();
    ++restarts_;
    awaiting_ = false;
    failed_ = false;  // a new incarnation
    return d;
  }
  if (recovery_ && failed_ && !stopping && !awaiting_) {
    awaiting_ = true;
    return {Next::kAwaitRecovery, ""};
  }
  if (awaiting_ && !stopping) return {Next::kWait, ""};  // the recovery window ends the run
  return {Next::kEnd, ""};
}

}  // namespace fl::harness
