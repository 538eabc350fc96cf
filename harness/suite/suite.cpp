// Running a suite: every selected case as its own `faultline run` process, `jobs` at a time, in a
// results directory of its own; retries, --fail-fast and --maxfail, GPU cases skipped without a
// device,
// progress, calibration samples through the window, and the summary files at the end.
#include "harness/suite/suite.hpp"

#include "harness/suite/executor.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/file_read.hpp"
#include "base/json_bounded.hpp"
#include "base/private_dir.hpp"
#include "base/settings.hpp"
#include "base/stats.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/progress.hpp"
#include "harness/suite/suite_live.hpp"
#include "kernels/device.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kSuiteStamp, std::string, "FAULTLINE_SUITE_STAMP", "",
                  "Time stamp in suite directory names, e.g. 20260101-120000 (default: the start "
                  "time; tests fix it to start suites in the same second)");

namespace {

// How a case without a device is refused by `faultline run` (runner.cpp), and how the suite
// recognises it in a run's log when the device went away after the suite checked.
constexpr const char* kNoDevice = "no CUDA device is visible";

// SIGINT/SIGTERM to the suite: the handler only records it; the loop stops starting runs,
// passes the signal on to the runs in flight (each ends as `interrupted`) and writes the summary.
volatile std::sig_atomic_t g_suite_signal = 0;
extern "C" void on_suite_signal(int sig) {
  g_suite_signal = sig;
}

}  // namespace

FailureLimit::FailureLimit(const SuiteOptions& o) {
  if (o.fail_fast) {
    limit_ = 1;
    option_ = "--fail-fast";
  } else if (o.max_fail > 0) {
    limit_ = o.max_fail;
    option_ = fmt::format("--maxfail {}", o.max_fail);
  }
}

bool FailureLimit::reached_by(const SuiteCase& c) {
  if (limit_ == 0 || !c.failed() || reached()) return false;
  failed_.push_back(case_label(c));
  return reached();
}

std::string FailureLimit::not_started() const {
  if (failed_.size() == 1) {
    return fmt::format("not started: {} stopped the suite after {} failed", option_, failed_[0]);
  }
  return fmt::format("not started: {} stopped the suite after {} cases failed ({})", option_,
                     failed_.size(), fmt::join(failed_, ", "));
}

bool is_failure(const std::string& outcome) {
  return outcome == "fail" || outcome == "unknown" || outcome == "error" ||
         outcome == "interrupted";
}

int suite_signal() {
  return g_suite_signal;
}

// Installs the handler for the suite's lifetime and restores what was there before.
struct SuiteSignals::Saved {
  struct sigaction old_int {
  }, old_term{};
};

SuiteSignals::SuiteSignals() : saved_(std::make_unique<Saved>()) {
  g_suite_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_suite_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &saved_->old_int);
  ::sigaction(SIGTERM, &sa, &saved_->old_term);
}

SuiteSignals::~SuiteSignals() {
  ::sigaction(SIGINT, &saved_->old_int, nullptr);
  ::sigaction(SIGTERM, &saved_->old_term, nullptr);
}

SuiteAttempt read_attempt(const std::string& run_dir, int status) {
  SuiteAttempt a;
  a.run_dir = run_dir;
  // The run's files are read as another user may have left them (base/json_bounded.hpp).
  const auto v = read_json_file(run_dir + "/verdict.json").value_or(nlohmann::json());
  if (!v.is_object()) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream log(run_dir + ".log");
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    if (code == 2 && text.find(kNoDevice) != std::string::npos) {
      a.outcome = "skipped";
      a.explanation = fmt::format("{} (the run refused to start)", kNoDevice);
      return a;
    }
    a.outcome = "error";
    a.explanation = fmt::format("no verdict (exit status {}; see {}.log)", code, run_dir);
    return a;
  }
  a.outcome = v.value("outcome", "unknown");
  a.explanation = v.value("explanation", "");
  if (v.value("state", "") == "running") {
    // The run ended before it wrote its verdict (killed before its own signal handling began).
    const bool signaled = WIFSIGNALED(status);
    a.outcome = signaled ? "interrupted" : "error";
    a.explanation = fmt::format(
        "the run ended by {} before its verdict (see {}.log)",
        signaled ? signal_name(WTERMSIG(status))
                 : fmt::format("exit status {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1),
        run_dir);
    return a;
  }
  if (v.contains("harness_error")) {
    a.outcome = "error";
    a.explanation = v["harness_error"].get<std::string>();
  }
  return a;
}

std::string case_label(const SuiteCase& c) {
  return fmt::format("{}{} seed {}", c.name, c.fix ? " [fix]" : "", c.seed);
}

std::string attempt_id(const SuiteCase& c, int attempt) {
  return attempt == 0 ? c.id() : fmt::format("{}-try{}", c.id(), attempt + 1);
}

std::vector<std::string> run_argv(const std::string& bin, const SuiteCase& c, int attempt,
                                  const std::string& runs_dir, const SuiteOptions& o) {
  std::vector<std::string> argv{bin,
                                "run",
                                c.scenario_file,
                                "--results",
                                runs_dir,
                                "--run-id",
                                attempt_id(c, attempt),
                                "--set",
                                fmt::format("seed={}", c.seed)};
  if (c.fix) argv.push_back("--fix");
  argv.insert(argv.end(), o.run_args.begin(), o.run_args.end());
  return argv;
}

void settle_case(SuiteCase& c, const SuiteAttempt& a) {
  c.outcome = a.outcome;
  c.explanation = a.explanation;
  if (a.outcome == "pass" && c.attempts.size() > 1) c.outcome = "flaky";
  c.run_dir = a.run_dir;
  const auto v = read_json_file(a.run_dir + "/verdict.json").value_or(nlohmann::json());
  if (v.is_object()) c.manifested_s = v.value("manifested_s", -1.0);
  c.tokens_per_s = median_tokens_per_s(a.run_dir);
}

bool SuiteCase::failed() const {
  return is_failure(outcome);
}

int SuiteResult::failures() const {
  return static_cast<int>(
      std::count_if(cases.begin(), cases.end(), [](auto& c) { return c.failed(); }));
}

int SuiteResult::exit_code() const {
  if (!interrupted.empty() || count("interrupted") > 0) return 4;
  return failures() == 0 && missing.empty() ? 0 : 1;
}

int SuiteResult::count(const std::string& outcome) const {
  return static_cast<int>(
      std::count_if(cases.begin(), cases.end(), [&](auto& c) { return c.outcome == outcome; }));
}

std::string make_unique_dir(const std::string& parent, const std::string& base) {
  fs::create_directories(parent);
  const fs::path p = fs::absolute(parent);
  for (int n = 1; n < 10000; ++n) {
    const fs::path dir = p / (n == 1 ? base : fmt::format("{}-{}", base, n));
    if (::mkdir(dir.c_str(), 0755) == 0) return dir.lexically_normal().string();
    if (errno != EEXIST) {
      throw Error(
          fmt::format("{}: cannot create the directory: {}", dir.string(), std::strerror(errno)));
    }
  }
  throw Error(fmt::format("{}/{}: no free name", p.string(), base));
}

// Median of the steps' tokens/s in a run's history (each step counted once, at its slowest
// rank), 0 without steps.
double median_tokens_per_s(const std::string& run_dir) {
  std::map<int64_t, double> per_step;
  const FileFd f = open_regular_file(run_dir + "/history.jsonl", nullptr);
  LineReader in(kMaxEventLineBytes);
  std::string line;
  for (LineReader::Got g; f && (g = in.next(f.get(), &line)) != LineReader::Got::kEnd;) {
    if (g != LineReader::Got::kLine) continue;
    if (line.find("\"kind\":\"step\"") == std::string::npos) continue;
    const auto parsed = try_parse_json_bounded(line);
    if (!parsed || !parsed->is_object() || parsed->value("source", "") != "rank") continue;
    const auto& j = *parsed;
    const auto d = j.find("data");
    const double t = d != j.end() && d->is_object() ? d->value("tokens_per_s", 0.0) : 0.0;
    if (t <= 0) continue;
    auto [it, fresh] = per_step.emplace(j.value("step", int64_t{-1}), t);
    if (!fresh) it->second = std::min(it->second, t);
  }
  std::vector<double> v;
  for (auto& [s, t] : per_step) v.push_back(t);
  return stats::upper_median(std::move(v));
}

namespace {

// The default: every try a `faultline run` process on this machine, `jobs` at a time.
class LocalExecutor : public SuiteExecutor {
 public:
  void check(const std::vector<SuiteCase>&, const SuiteOptions& o) override {
    if (!o.slurm.partition.empty() || !o.slurm.time_limit.empty() || o.slurm.overcommit ||
        !o.slurm.sbatch_args.empty()) {
      throw UsageError(
          "--partition, --time-limit, --overcommit and --sbatch-arg need --executor slurm");
    }
  }
  void execute(SuiteResult& res, const SuiteOptions& o, const std::string& bin) override;
};

}  // namespace

std::unique_ptr<SuiteExecutor> make_local_executor() {
  return std::make_unique<LocalExecutor>();
}

const std::vector<std::string>& executor_names() {
  static const std::vector<std::string> names = {"local", "slurm"};
  return names;
}

SuiteResult run_suite(const std::string& path, const SuiteOptions& o) {
  if (o.max_fail < 0) {
    throw UsageError(
        fmt::format("--maxfail {}: expected 0 (no limit) or more failed cases", o.max_fail));
  }
  SuitePlan plan = plan_suite(path, o);
  std::unique_ptr<SuiteExecutor> executor;
  if (o.executor == "local") {
    executor = make_local_executor();
  } else if (o.executor == "slurm") {
    executor = make_slurm_executor();
  } else {
    throw UsageError(fmt::format("--executor '{}': not an executor (allowed: {})", o.executor,
                                 fmt::join(executor_names(), ", ")));
  }
  executor->check(plan.cases, o);
  SuiteResult res;
  res.name = plan.name;
  res.cases = std::move(plan.cases);
  if (o.select.shard_count > 0) {
    const std::string shard = fmt::format("{}/{}", o.select.shard_index, o.select.shard_count);
    for (auto& c : res.cases) c.shard = shard;
  }
  res.selection = plan.selection;
  res.notes = plan.notes;
  res.launch_order = std::move(plan.launch_order);
  res.provenance = collect_provenance();
  const auto t_start = std::chrono::steady_clock::now();
  std::string ts = kSuiteStamp.get();
  if (ts.empty()) {
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
    ts = buf;
  }
  // No other user may be able to write where the suite's directory and its runs go.
  if (const auto why = make_private_dir(o.results_dir, "--results", o.allow_shared_results);
      !why.empty()) {
    std::fprintf(stderr, "faultline: warning: accepted with --allow-shared-results: %s\n",
                 why.c_str());
  }
  res.dir = make_unique_dir(o.results_dir, fmt::format("{}-{}{}", ts, plan.name, o.name_suffix));
  fs::create_directories(res.dir + "/runs");
  const std::string bin =
      o.faultline_bin.empty() ? fs::read_symlink("/proc/self/exe").string() : o.faultline_bin;
  res.provenance.calibrate(0);
  res.selection["executor"] = o.executor;
  // The live endpoint goes before the state it reads.
  const auto live = std::make_unique<SuiteLive>(res);
  std::unique_ptr<MetricsEndpoint> endpoint;
  if (!o.metrics_listen.empty()) {
    endpoint = start_suite_metrics(res, o, *live);
    res.live = live.get();
  }
  executor->execute(res, o, bin);
  res.provenance.load1_end = load_average_1m();
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  // The suite directory always holds both files (--last-failed reads summary.json there); --junit
  // and --json write a copy where CI wants it.
  const std::string junit = suite_junit(res);
  const std::string json =
      suite_json(res).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_atomic(res.dir + "/junit.xml", junit);
  write_atomic(res.dir + "/summary.json", json);
  if (!o.junit_path.empty()) write_atomic(o.junit_path, junit);
  if (!o.json_path.empty()) write_atomic(o.json_path, json);
  res.live = nullptr;
  return res;
}

namespace {

// One local suite: the queue of tries, the runs in flight (at most `jobs`), the signal and
// --maxfail bookkeeping; run() loops until nothing is queued or in flight.
class LocalSuiteLoop {
 public:
  LocalSuiteLoop(SuiteResult& res, const SuiteOptions& o, const std::string& bin)
      : res_(res),
        o_(o),
        bin_(bin),
        jobs_(std::max(1, o.jobs)),
        progress_(stderr, o.progress, ::isatty(2) != 0, res.cases.size(), jobs_),
        limit_(o) {}

  void run() {
    queue_cases();
    while (!running_.empty() || (!queue_.empty() && !stop_launching_)) {
      forward_signal();
      launch();
      if (running_.empty()) break;
      int st = 0;
      const pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid == 0) {  // nothing ended yet: keep the ETA moving
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (++idle_ticks_ % 10 == 0) progress_.redraw();
        continue;
      }
      if (pid < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (auto it = running_.find(pid); it != running_.end()) {
        const Running r = it->second;
        running_.erase(it);
        finished(r, st);
      }
    }
    if (g_suite_signal != 0 && res_.interrupted.empty()) {
      res_.interrupted = signal_name(g_suite_signal);
    }
    settle_not_started();
    progress_.close();
    res_.provenance.calibrate(finished_runs_);
  }

 private:
  struct Running {
    size_t index;
    int attempt;
    std::string run_dir;
    std::chrono::steady_clock::time_point started;
  };

  // Cases a machine without a device cannot run are skipped without starting them.
  // --longest-first: in the plan's launch order.
  void queue_cases() {
    for (size_t k = 0; k < res_.cases.size(); ++k) {
      const size_t i = res_.launch_order.empty() ? k : res_.launch_order[k];
      SuiteCase& c = res_.cases[i];
      if (c.device == "cuda" && cuda_device_count() == 0) {
        c.outcome = "skipped";
        c.explanation = fmt::format("workload.device is cuda but {} on this machine", kNoDevice);
        progress_.skipped();
        if (res_.live) res_.live->ended(i, c.outcome, 0);
        continue;
      }
      queue_.emplace_back(i, 0);
    }
  }

  void forward_signal() {
    if (g_suite_signal == 0 || forwarded_) return;
    forwarded_ = true;
    stop_launching_ = true;
    res_.interrupted = signal_name(g_suite_signal);
    for (auto& [pid, r] : running_) ::kill(pid, g_suite_signal);
  }

  void launch() {
    bool launched = false;
    while (static_cast<int>(running_.size()) < jobs_ && !queue_.empty() && !stop_launching_) {
      auto [index, attempt] = queue_.front();
      queue_.pop_front();
      const SuiteCase& c = res_.cases[index];
      const std::string run_dir = res_.dir + "/runs/" + attempt_id(c, attempt);
      const pid_t pid =
          spawn_logged(run_argv(bin_, c, attempt, res_.dir + "/runs", o_), run_dir + ".log");
      running_[pid] = {index, attempt, run_dir, std::chrono::steady_clock::now()};
      if (res_.live) res_.live->started(index);
      launched = true;
    }
    if (launched) progress_.running(names_in_flight());
  }

  void finished(const Running& r, int status) {
    SuiteCase& c = res_.cases[r.index];
    SuiteAttempt a = read_attempt(r.run_dir, status);
    a.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.started).count();
    c.attempts.push_back(a);
    c.wall_s += a.wall_s;
    ++finished_runs_;
    // A failed expectation gets another try; a harness error or a refusal does not.
    const bool retry = (a.outcome == "fail" || a.outcome == "unknown") && r.attempt < o_.retries &&
                       !stop_launching_;
    if (retry) {
      queue_.emplace_front(r.index, r.attempt + 1);
    } else {
      settle_case(c, a);
      if (limit_.reached_by(c)) stop_launching_ = true;
    }
    if (res_.live) res_.live->ended(r.index, retry ? "" : c.outcome, a.wall_s);
    progress_.finished(
        fmt::format("{}: {}{} ({:.1f} s)", case_label(c), a.outcome,
                    c.outcome == "flaky" ? " on try " + std::to_string(r.attempt + 1) : "",
                    a.wall_s),
        a.wall_s, is_failure(a.outcome), retry);
    progress_.running(names_in_flight());
    if (o_.calibrate_every > 0 && finished_runs_ % o_.calibrate_every == 0) {
      res_.provenance.calibrate(finished_runs_);
    }
  }

  // What is still queued was stopped by a signal or by --fail-fast/--maxfail.
  void settle_not_started() {
    for (auto& [index, attempt] : queue_) {
      SuiteCase& c = res_.cases[index];
      if (!res_.interrupted.empty()) {
        c.outcome = "interrupted";
        c.explanation = fmt::format("not started: the suite got {}", res_.interrupted);
      } else {
        c.outcome = "skipped";
        c.explanation = limit_.not_started();
      }
      progress_.skipped();
      if (res_.live) res_.live->ended(index, c.outcome, 0);
    }
  }

  std::vector<std::string> names_in_flight() const {
    std::vector<std::string> n;
    for (auto& [pid, r] : running_) n.push_back(case_label(res_.cases[r.index]));
    return n;
  }

  SuiteResult& res_;
  const SuiteOptions& o_;
  const std::string& bin_;
  const int jobs_;
  SuiteProgress progress_;
  FailureLimit limit_;
  SuiteSignals signals_;
  std::deque<std::pair<size_t, int>> queue_;  // (case, try from 0)
  std::map<pid_t, Running> running_;
  bool stop_launching_ = false;
  bool forwarded_ = false;
  int finished_runs_ = 0;
  int idle_ticks_ = 0;
};

}  // namespace

void LocalExecutor::execute(SuiteResult& res, const SuiteOptions& o, const std::string& bin) {
  LocalSuiteLoop(res, o, bin).run();
}

}  // namespace fl::harness
