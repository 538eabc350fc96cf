// A running suite's live state for its /metrics endpoint (`faultline suite --metrics-port`,
// docs/reports.md#live-metrics): each case queued, running or settled, its tries and its time so
// far. The local executor reports to it as cases start and end; a scrape reads it from the
// endpoint's threads, so every method takes the lock.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness/control/metrics_endpoint.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness {

class SuiteLive {
 public:
  explicit SuiteLive(const SuiteResult& res);

  void started(size_t index);
  // A try ended: `outcome` is the case's final one, or "" when it gets another try.
  void ended(size_t index, const std::string& outcome, double wall_s);

  // faultline_suite_runs (by outcome, with queued and running), the suite's wall time and each
  // case's duration so far (its label sets as `faultline metrics` writes them after the end).
  std::vector<MetricValues> values() const;

 private:
  struct Case {
    std::string id, outcome;                      // outcome "" : queued; "running"; else settled
    double wall_s = 0;                            // of the tries that ended
    std::chrono::steady_clock::time_point since;  // the running try's start
  };
  mutable std::mutex mu_;
  std::string suite_, commit_, host_, started_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<Case> cases_;
};

// Starts the suite's endpoint on o.metrics_listen: the secret is o.metrics_secret, else a fresh
// one in SUITE_DIR/metrics.secret (0600); the bound address goes to SUITE_DIR/metrics.addr and a
// line on stderr.
std::unique_ptr<MetricsEndpoint> start_suite_metrics(const SuiteResult& res, const SuiteOptions& o,
                                                     const SuiteLive& live);

}  // namespace fl::harness
