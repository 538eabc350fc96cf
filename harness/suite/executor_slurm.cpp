// `faultline suite --executor slurm`: the suite's tries as sbatch job arrays a round (the first
// tries, then each round of retries), one array per resource shape (nodes, tasks per node), every
// array task one `faultline run` into the suite's own runs/ directory on the shared filesystem;
// the executor polls the arrays' tasks together and reads each
// finished run as the local executor does. A task Slurm ended before its run could (time limit,
// node failure, cancel) or that never ran becomes an error naming the array task, the case and
// Slurm's state (docs/cluster.md#suites-as-a-slurm-job-array).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/settings.hpp"
#include "base/subprocess.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/executor.hpp"
#include "harness/suite/progress.hpp"
#include "harness/suite/slurm_cluster.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kSlurmPollMs, int64_t, "FAULTLINE_SLURM_POLL_MS", 2000,
                  "How often faultline suite --executor slurm asks Slurm how its array stands");
FAULTLINE_SETTING(kSlurmCancelWaitS, int64_t, "FAULTLINE_SLURM_CANCEL_WAIT_S", 120,
                  "How long an interrupted slurm suite waits for its cancelled tasks to end");

namespace {

using Clock = std::chrono::steady_clock;

// The batch script of every array task: its argv, NUL-separated, from the round's directory
// ($1), run from where the suite was started ($2). No word of it comes from a scenario.
constexpr const char* kArrayScript = R"(#!/bin/bash
# faultline suite --executor slurm: array task $SLURM_ARRAY_TASK_ID runs one try of one case.
# $1: the round's directory (task-N.argv: the argv, NUL-separated); $2: the suite's working
# directory.
set -u
args=()
while IFS= read -r -d '' a; do args+=("$a"); done <"$1/task-$SLURM_ARRAY_TASK_ID.argv"
cd "$2" || exit 2
exec "${args[@]}"
)";

// Sleeps `ms`, waking early for a signal to the suite.
void nap(int64_t ms) {
  for (int64_t t = 0; t < ms && suite_signal() == 0; t += 50) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string tail_line(const std::string& text) {
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  s = s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

class SlurmExecutor : public SuiteExecutor {
 public:
  void check(const std::vector<SuiteCase>& cases, const SuiteOptions& o) override {
    req_ = slurm::check_cluster(cases, o);
  }
  void execute(SuiteResult& res, const SuiteOptions& o, const std::string& bin) override;

 private:
  struct Try {
    size_t index;  // the case
    int attempt;   // from 0
  };
  // One submitted array of a round: its tries (task k is tries[k]) and what polling saw of them.
  struct Array {
    std::string job, dir;
    std::vector<Try> tries;
    std::map<int, slurm::TaskState> last;
    std::map<int, int> missing;  // polls in a row that did not list a task
    std::set<int> settled;
  };
  // One round: submits the tries as an array and waits for every task; fills `retry` with the
  // tries a failed expectation earns.
  void run_round(SuiteResult& res, const SuiteOptions& o, const std::string& bin,
                 const std::vector<Try>& tries, std::vector<Try>& retry);
  // One array per resource shape (nodes, tasks per node), in the order the shapes first appear;
  // a refused submission settles its tries as errors and yields no array.
  std::vector<Array> submit_round(SuiteResult& res, const SuiteOptions& o, const std::string& bin,
                                  const std::vector<Try>& tries);
  // Polls the arrays until every task settled, or was lost after a signal's scancel.
  void wait_round(SuiteResult& res, const SuiteOptions& o, std::vector<Array>& arrays,
                  std::vector<Try>& retry);
  // Polls each array once: settles the tasks that ended; returns the running cases' labels.
  std::vector<std::string> poll_round(SuiteResult& res, const SuiteOptions& o,
                                      std::vector<Array>& arrays, std::vector<Try>& retry);
  // A task Slurm lost track of (or that outlived scancel) ends as LOST, with what was last seen.
  void settle_lost(SuiteResult& res, const SuiteOptions& o, Array& a, int k, const std::string& why,
                   std::vector<Try>& retry);
  std::string submit(SuiteResult& res, const SuiteOptions& o, const std::string& round_dir,
                     size_t tasks, const slurm::Shape& shape);
  // A task ended (terminal state `t`): the try's attempt, and the case's outcome when final.
  void settle(SuiteResult& res, const SuiteOptions& o, const std::string& job, int task,
              const Try& tr, const slurm::TaskState& t, const std::string& log,
              std::vector<Try>& retry);

  slurm::Request req_;
  std::unique_ptr<SuiteProgress> progress_;
  std::string cwd_, suite_dir_;
  int round_ = 0, finished_ = 0;
  bool stop_ = false;                    // --fail-fast / --maxfail reached; nothing new starts
  bool cancelled_pending_ = false;       // ... and the array's pending tasks were cancelled
  bool cancelled_all_ = false;           // the suite got a signal and cancelled the array
  FailureLimit limit_{SuiteOptions{}};   // set from the options in execute()
  std::vector<std::string> round_jobs_;  // the arrays of the round under way (one per shape)
};

std::string SlurmExecutor::submit(SuiteResult& res, const SuiteOptions& o,
                                  const std::string& round_dir, size_t tasks,
                                  const slurm::Shape& shape) {
  std::vector<std::string> argv{"sbatch", "--parsable"};
  std::string array = fmt::format("--array=0-{}", tasks - 1);
  if (o.slurm.max_running > 0) array += fmt::format("%{}", o.slurm.max_running);
  argv.push_back(array);
  argv.push_back("--job-name=faultline-" + res.name);
  argv.push_back("--partition=" + req_.partition);
  argv.push_back(fmt::format("--nodes={}", shape.nodes));
  argv.push_back(fmt::format("--ntasks-per-node={}", shape.tasks_per_node));
  if (o.slurm.overcommit) argv.push_back("--overcommit");
  if (!o.slurm.time_limit.empty()) argv.push_back("--time=" + o.slurm.time_limit);
  // Relative to --chdir: the round's directory, whatever characters the suite's path holds.
  argv.push_back("--chdir=" + round_dir);
  argv.push_back("--output=task-%a.out");
  argv.insert(argv.end(), o.slurm.sbatch_args.begin(), o.slurm.sbatch_args.end());
  argv.insert(argv.end(), {suite_dir_ + "/slurm/array.sh", round_dir, cwd_});
  const auto out = run_tool_status(argv);
  std::string job;
  std::stringstream lines(out.output);
  for (std::string l; std::getline(lines, l);) {
    const std::string id = l.substr(0, l.find(';'));  // "JOB" or "JOB;CLUSTER"
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) job = id;
  }
  if (out.status != 0 || job.empty()) {
    throw Error(fmt::format("sbatch did not take the array (exit status {}): {}", out.status,
                            tail_line(out.output)));
  }
  res.slurm["jobs"].push_back({{"id", job},
                               {"round", round_},
                               {"tasks", tasks},
                               {"nodes", shape.nodes},
                               {"tasks_per_node", shape.tasks_per_node},
                               {"dir", round_dir},
                               {"sbatch", argv}});
  return job;
}

void SlurmExecutor::settle(SuiteResult& res, const SuiteOptions& o, const std::string& job,
                           int task, const Try& tr, const slurm::TaskState& t,
                           const std::string& log, std::vector<Try>& retry) {
  SuiteCase& c = res.cases[tr.index];
  const std::string id = attempt_id(c, tr.attempt);
  const std::string run_dir = suite_dir_ + "/runs/" + id;
  const std::string where = fmt::format("{}_{}", job, task);
  std::error_code ec;
  fs::rename(log, run_dir + ".log", ec);  // where the local executor keeps a run's output
  const bool started = fs::exists(run_dir);
  const std::string slurm_said =
      fmt::format("Slurm array task {} ({}) ended {}{}{}", where, case_label(c), t.state,
                  t.reason.empty() || t.reason == "None" ? "" : " (" + t.reason + ")",
                  t.node.empty() ? "" : " on " + t.node);
  if (!started && t.state == "CANCELLED" && (cancelled_all_ || cancelled_pending_)) {
    // Never started because the suite stopped it: as the local executor reports a queued case.
    c.outcome = cancelled_all_ ? "interrupted" : "skipped";
    c.explanation = cancelled_all_ ? fmt::format("not started: the suite got {} ({})",
                                                 res.interrupted, slurm_said)
                                   : limit_.not_started();
    progress_->skipped();
    return;
  }
  SuiteAttempt a;
  if (t.state == "COMPLETED" || t.state == "FAILED") {
    a = read_attempt(run_dir, slurm::wait_status(t.exit_code));
    if (a.outcome == "error" && a.explanation.rfind("no verdict", 0) == 0) {
      a.explanation += "; " + slurm_said + " with exit code " + t.exit_code;
    }
  } else {
    // Slurm ended it (time limit, node failure, cancel, preemption) or it never ran: an error
    // naming the task, unless the suite's own signal cancelled it.
    const SuiteAttempt run = read_attempt(run_dir, slurm::wait_status(t.exit_code));
    a.run_dir = run_dir;
    a.outcome = cancelled_all_ ? "interrupted" : "error";
    a.explanation =
        slurm_said + (started ? "; the run said: " + run.outcome + ": " + run.explanation
                              : "; the run never started");
    if (cancelled_all_) a.explanation = "the suite got " + res.interrupted + "; " + a.explanation;
  }
  a.job = where + " " + t.state;
  a.wall_s = t.run_s;
  c.attempts.push_back(a);
  c.wall_s += a.wall_s;
  ++finished_;
  const bool again = (a.outcome == "fail" || a.outcome == "unknown") && tr.attempt < o.retries &&
                     !stop_ && !cancelled_all_;
  if (again) {
    retry.push_back({tr.index, tr.attempt + 1});
  } else {
    settle_case(c, a);
    if (limit_.reached_by(c)) {
      stop_ = true;
      // Start nothing new: the round's arrays' pending tasks go, the running ones finish.
      for (const auto& j : round_jobs_) run_tool_status({"scancel", "--state=PENDING", j});
      cancelled_pending_ = true;
    }
  }
  progress_->finished(
      fmt::format("{}: {}{} ({:.0f} s, task {})", case_label(c), a.outcome,
                  c.outcome == "flaky" ? " on try " + std::to_string(tr.attempt + 1) : "", a.wall_s,
                  where),
      a.wall_s, is_failure(a.outcome), again);
  if (o.calibrate_every > 0 && finished_ % o.calibrate_every == 0) {
    res.provenance.calibrate(finished_);
  }
}

void SlurmExecutor::run_round(SuiteResult& res, const SuiteOptions& o, const std::string& bin,
                              const std::vector<Try>& tries, std::vector<Try>& retry) {
  ++round_;
  std::vector<Array> arrays = submit_round(res, o, bin, tries);
  wait_round(res, o, arrays, retry);
}

std::vector<SlurmExecutor::Array> SlurmExecutor::submit_round(SuiteResult& res,
                                                              const SuiteOptions& o,
                                                              const std::string& bin,
                                                              const std::vector<Try>& tries) {
  const std::string round_dir = fmt::format("{}/slurm/round{}", suite_dir_, round_);
  std::vector<std::pair<slurm::Shape, std::vector<Try>>> groups;
  for (const auto& tr : tries) {
    const slurm::Shape& sh = req_.case_shapes.at(tr.index);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == sh; });
    if (it == groups.end()) it = groups.insert(groups.end(), {sh, {}});
    it->second.push_back(tr);
  }
  std::vector<Array> arrays;
  round_jobs_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    Array a;
    a.dir = groups.size() == 1 ? round_dir : fmt::format("{}/group{}", round_dir, g);
    a.tries = groups[g].second;
    fs::create_directories(a.dir);
    for (size_t k = 0; k < a.tries.size(); ++k) {
      std::string text;
      for (const auto& w : run_argv(bin, res.cases[a.tries[k].index], a.tries[k].attempt,
                                    suite_dir_ + "/runs", o)) {
        text += w;
        text.push_back('\0');
      }
      write_atomic(fmt::format("{}/task-{}.argv", a.dir, k), text);
    }
    try {
      a.job = submit(res, o, a.dir, a.tries.size(), groups[g].first);
    } catch (const Error& e) {
      for (const auto& tr : a.tries) {  // a refused submission is every try's error, never lost
        SuiteCase& c = res.cases[tr.index];
        SuiteAttempt at{"error", e.what(), suite_dir_ + "/runs/" + attempt_id(c, tr.attempt), 0,
                        ""};
        c.attempts.push_back(at);
        settle_case(c, at);
        progress_->finished(case_label(c) + ": error (" + e.what() + ")", 0, true, false);
      }
      continue;
    }
    round_jobs_.push_back(a.job);
    arrays.push_back(std::move(a));
  }
  return arrays;
}

void SlurmExecutor::settle_lost(SuiteResult& res, const SuiteOptions& o, Array& a, int k,
                                const std::string& why, std::vector<Try>& retry) {
  slurm::TaskState t = a.last.count(k) ? a.last[k] : slurm::TaskState{};
  const std::string seen = t.state.empty() ? "never listed" : "last seen " + t.state;
  t.state = fmt::format("LOST ({}; {})", why, seen);
  t.reason.clear();
  settle(res, o, a.job, k, a.tries[k], t, fmt::format("{}/task-{}.out", a.dir, k), retry);
  a.settled.insert(k);
}

std::vector<std::string> SlurmExecutor::poll_round(SuiteResult& res, const SuiteOptions& o,
                                                   std::vector<Array>& arrays,
                                                   std::vector<Try>& retry) {
  std::vector<std::string> running;
  for (auto& a : arrays) {
    const int n = static_cast<int>(a.tries.size());
    if (static_cast<int>(a.settled.size()) == n) continue;
    const auto q = slurm::query_array(a.job);
    for (int k = 0; k < n; ++k) {
      if (a.settled.count(k)) continue;
      const auto it = q ? q->find(k) : std::map<int, slurm::TaskState>::const_iterator{};
      if (!q || it == q->end()) {
        // Slurm no longer lists it (purged, or the controller restarted without its state).
        if (++a.missing[k] >= 3) settle_lost(res, o, a, k, "Slurm no longer lists it", retry);
        continue;
      }
      a.missing[k] = 0;
      a.last[k] = it->second;
      if (slurm::is_terminal(it->second.state)) {
        settle(res, o, a.job, k, a.tries[k], it->second, fmt::format("{}/task-{}.out", a.dir, k),
               retry);
        a.settled.insert(k);
      } else if (it->second.state == "RUNNING") {
        running.push_back(case_label(res.cases[a.tries[k].index]));
      }
    }
  }
  return running;
}

void SlurmExecutor::wait_round(SuiteResult& res, const SuiteOptions& o, std::vector<Array>& arrays,
                               std::vector<Try>& retry) {
  Clock::time_point cancelled_at;
  auto all_settled = [&] {
    for (const auto& a : arrays) {
      if (a.settled.size() < a.tries.size()) return false;
    }
    return true;
  };
  while (!all_settled()) {
    if (suite_signal() != 0 && !cancelled_all_) {
      res.interrupted = signal_name(suite_signal());
      cancelled_all_ = true;
      cancelled_at = Clock::now();
      // Running tasks get SIGTERM, pending ones never start.
      for (const auto& a : arrays) run_tool_status({"scancel", a.job});
    }
    progress_->running(poll_round(res, o, arrays, retry));
    if (all_settled()) break;
    if (cancelled_all_ &&
        Clock::now() - cancelled_at > std::chrono::seconds(kSlurmCancelWaitS.get())) {
      for (auto& a : arrays) {
        for (int k = 0; k < static_cast<int>(a.tries.size()); ++k) {
          if (!a.settled.count(k)) settle_lost(res, o, a, k, "not ended after scancel", retry);
        }
      }
      break;
    }
    nap(kSlurmPollMs.get());
    progress_->redraw();
  }
}

void SlurmExecutor::execute(SuiteResult& res, const SuiteOptions& o, const std::string& bin) {
  suite_dir_ = res.dir;
  limit_ = FailureLimit(o);
  cwd_ = fs::current_path().string();
  fs::create_directories(suite_dir_ + "/slurm");
  write_atomic(suite_dir_ + "/slurm/array.sh", kArrayScript);
  fs::permissions(suite_dir_ + "/slurm/array.sh",
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec);
  res.slurm = {{"partition", req_.partition},           {"nodes", req_.nodes},
               {"tasks_per_node", req_.tasks_per_node}, {"overcommit", o.slurm.overcommit},
               {"time_limit", o.slurm.time_limit},      {"jobs", nlohmann::json::array()}};
  const int at_once =
      o.slurm.max_running > 0 ? o.slurm.max_running : static_cast<int>(res.cases.size());
  progress_ = std::make_unique<SuiteProgress>(stderr, o.progress, ::isatty(2) != 0,
                                              res.cases.size(), at_once);
  SuiteSignals signals;
  std::vector<Try> tries;
  for (size_t k = 0; k < res.cases.size(); ++k) {  // --longest-first: the plan's order
    tries.push_back({res.launch_order.empty() ? k : res.launch_order[k], 0});
  }
  while (!tries.empty() && !stop_ && !cancelled_all_) {
    std::vector<Try> retry;
    run_round(res, o, bin, tries, retry);
    tries = std::move(retry);
  }
  if (suite_signal() != 0 && res.interrupted.empty()) res.interrupted = signal_name(suite_signal());
  for (const auto& tr : tries) {  // retries a stop left unsubmitted, as the local executor
    SuiteCase& c = res.cases[tr.index];
    if (!res.interrupted.empty()) {
      c.outcome = "interrupted";
      c.explanation = fmt::format("not started: the suite got {}", res.interrupted);
    } else {
      c.outcome = "skipped";
      c.explanation = limit_.not_started();
    }
    progress_->skipped();
  }
  progress_->close();
  res.provenance.calibrate(finished_);
}

}  // namespace

std::unique_ptr<SuiteExecutor> make_slurm_executor() {
  return std::make_unique<SlurmExecutor>();
}

}  // namespace fl::harness
