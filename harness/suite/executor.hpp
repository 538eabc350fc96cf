// Where a suite's runs execute. run_suite plans the cases, asks the executor to refuse what it
// cannot run (before the suite directory exists), creates the directory, lets the executor run
// every case into DIR/runs/<id> and writes the summary files itself, so every executor yields the
// same suite directory. `local` (the default) runs `faultline run` processes on this machine;
// `slurm` submits them as one sbatch job array (executor_slurm.cpp, docs/cluster.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/suite/suite.hpp"

namespace fl::harness {

class SuiteExecutor {
 public:
  virtual ~SuiteExecutor() = default;
  // Throws UsageError for what this executor cannot run (nothing was started or submitted).
  virtual void check(const std::vector<SuiteCase>& cases, const SuiteOptions& o) = 0;
  // Runs res.cases into res.dir + "/runs" with `bin` as the CLI; every case ends with an outcome
  // (pass, fail, unknown, error, flaky, skipped, interrupted) and its attempts. Sets
  // res.interrupted when the suite got SIGINT/SIGTERM.
  virtual void execute(SuiteResult& res, const SuiteOptions& o, const std::string& bin) = 0;
};

std::unique_ptr<SuiteExecutor> make_local_executor();
std::unique_ptr<SuiteExecutor> make_slurm_executor();

// `faultline run` for one try of a case (try from 0): its argv and its run id ("<id>" or
// "<id>-tryN").
std::string attempt_id(const SuiteCase& c, int attempt);
std::vector<std::string> run_argv(const std::string& bin, const SuiteCase& c, int attempt,
                                  const std::string& runs_dir, const SuiteOptions& o);

// What one try of a run says: its verdict.json, else how the process ended (`status`, as
// waitpid gives it) and its log (RUN_DIR.log).
SuiteAttempt read_attempt(const std::string& run_dir, int status);
// The final outcome of a case from its last try: outcome, flaky, run_dir, manifested_s, tokens/s.
void settle_case(SuiteCase& c, const SuiteAttempt& last);
std::string case_label(const SuiteCase& c);
bool is_failure(const std::string& outcome);

// --fail-fast and --maxfail N: counts the cases that finally failed, says when to start nothing
// new (runs in flight finish) and explains the cases left over.
class FailureLimit {
 public:
  explicit FailureLimit(const SuiteOptions& o);
  // Counts a settled case; true when this case reached the limit (the first time only).
  bool reached_by(const SuiteCase& c);
  bool reached() const { return limit_ > 0 && static_cast<int>(failed_.size()) >= limit_; }
  // "not started: --maxfail 2 stopped the suite after 2 cases failed (a seed 7, b seed 7)";
  // with one case "... after a seed 7 failed". --last-failed reruns what it names.
  std::string not_started() const;

 private:
  int limit_ = 0;  // 0: no limit
  std::string option_;
  std::vector<std::string> failed_;  // case labels, up to the limit
};

// SIGINT/SIGTERM during a suite: the handler only records the signal (suite_signal() returns it,
// 0 when none); installed for the object's lifetime.
class SuiteSignals {
 public:
  SuiteSignals();
  ~SuiteSignals();
  SuiteSignals(const SuiteSignals&) = delete;
  SuiteSignals& operator=(const SuiteSignals&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};
int suite_signal();

}  // namespace fl::harness
