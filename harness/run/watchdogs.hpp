// The run's watchdogs (runner.cpp's tick asks them): the hang watchdog, which ends a run that
// expects a hang once the hang is established, and fail-fast, which gives the survivors of a
// rank's own failure a grace period to report their view (a timeout, a missing peer) before the
// job is torn down, as torchrun's agent does.
#pragma once

#include <cstdint>
#include <mutex>

#include "harness/oracles/oracle.hpp"

namespace fl::harness {

class History;
struct Scenario;

class Watchdogs {
 public:
  // Keeps the history's summary up to date through a listener on `hist`: it must outlive the
  // history.
  Watchdogs(const Scenario& s, History& hist);

  // With detectors watching, an established hang goes on this long, as it would in a real job,
  // so that a detector's own timeout (not the oracle's) decides whether it sees it.
  static constexpr int64_t kToolHangWindowS = 10;
  // expect.oracle hang: whether the hang is established (and the tools' window over, when
  // `tools_watching`); looked at every 0.5 s at most.
  bool hang_established(bool tools_watching);

  // A rank failed on its own; the first such failure starts the grace period.
  void rank_failed(int rank);
  // The grace period is over: the rank that failed first and the grace, once per failure.
  bool fail_fast_due(int& failed_rank, double& grace_s);

 private:
  const Scenario& s_;
  History& hist_;
  std::mutex summary_mu_;
  RunSummary summary_;
  int64_t last_hang_check_ = 0;
  int64_t hang_first_ns_ = -1;  // when the hang watchdog saw the expected hang
  int64_t first_failure_ns_ = -1;
  int first_failure_rank_ = -1;
};

}  // namespace fl::harness
