// Runs beside the run (run_side.hpp): the preparation run, the after_prepare command and the
// baseline oracle's reference run.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "base/private_dir.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/event_loop.hpp"
#include "harness/run/run_side.hpp"
#include "harness/run/runner.hpp"

extern char** environ;

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

// The project tool an after_prepare command names (scenario validation allows no other).
std::string tool_path(const std::string& name) {
  if (name == "fl-ckpt") return this_build::ckpt_bin();
  raise<Error>("after_prepare: '{}' is not a tool it may run (allowed: fl-ckpt)", name);
}

// This harness's own program, for the reference run.
std::string harness_program() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "faultline") return self.string();
  return this_build::harness_bin();
}

}  // namespace

// The scenario's preparation run (no faults, must complete) in RUN_DIR/prepare; its checkpoints
// are copied into this run's, so damage done here never reaches the preparation's own files.
void SideRuns::run_preparation() {
  const std::string file = dir_ + "/prepare.yaml";
  run_dir_.write_atomic("prepare.yaml", s_.side_runs.prepare_yaml + "\n");
  const Scenario p = load_scenario(file);
  RunOptions po;
  po.results_dir = dir_;
  po.run_id = "prepare";
  po.print_summary = false;
  po.allow_shared_results = o_.allow_shared_results;  // above dir_ as for this run
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_scenario(p, po);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  hist_.harness("prepared",
                {{"run_dir", r.run_dir}, {"outcome", r.verdict.outcome}, {"seconds", secs}});
  if (r.exit_code != 0) {
    raise<Error>("the preparation run did not complete ({}: {}); see {}", r.verdict.outcome,
                 r.harness_error.empty() ? r.verdict.explanation : r.harness_error, r.run_dir);
  }
  run_after_prepare();  // e.g. fl-ckpt reshard from prepare/checkpoints into checkpoints
  if (fs::exists(r.run_dir + "/checkpoints") && !fs::exists(dir_ + "/checkpoints")) {
    fs::copy(r.run_dir + "/checkpoints", dir_ + "/checkpoints", fs::copy_options::recursive);
  }
}

// Runs the command with the run directory as its working directory, its output in
// RUN_DIR/after_prepare.log; a command that fails ends the run before any rank starts.
void SideRuns::run_after_prepare() {
  if (s_.side_runs.after_prepare.empty()) return;
  std::vector<std::string> argv = s_.side_runs.after_prepare;
  argv[0] = tool_path(argv[0]);
  const std::string log = dir_ + "/after_prepare.log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addchdir_np(&fa, dir_.c_str());
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) raise<Error>("after_prepare: cannot start {}: {}", argv[0], std::strerror(rc));
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  hist_.harness(
      "after_prepare",
      {{"argv", s_.side_runs.after_prepare}, {"status", code}, {"seconds", secs}, {"log", log}});
  if (!ok) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
    raise<Error>("after_prepare [{}] failed with status {} (see {}): {}",
                 fmt::join(s_.side_runs.after_prepare, " "), code, log, text);
  }
}

void SideRuns::start_baseline(Supervisor& sup, const bool& stopping) {
  if (s_.side_runs.baseline_yaml.empty()) return;
  const std::string file = dir_ + "/baseline.yaml";
  run_dir_.write_atomic("baseline.yaml", s_.side_runs.baseline_yaml + "\n");
  const Scenario ref = load_scenario(file);  // a reference that cannot load stops the run here
  baseline_wait_s_ = 2 * ref.timeouts.run_s + 30;
  ProcessSpec p;
  p.name = "baseline";
  p.argv = {harness_program(), "run", file, "--results", dir_, "--run-id", "baseline", "-q"};
  // Its results are this run's directory, whose ancestors were accepted only with the option.
  if (o_.allow_shared_results) p.argv.push_back("--allow-shared-results");
  p.cwd = dir_;
  for (auto& [k, v] : base_env()) p.env.push_back(k + "=" + v);
  baseline_pid_ = sup.spawn(p);
  hist_.harness("baseline_start",
                {{"pid", baseline_pid_}, {"scenario", file}, {"run_dir", dir_ + "/baseline"}});
  // This run's ranks start when the reference's do (its first `launch` event), so the two share
  // the same window: a reference that ran later, after this run's ranks had left the host, saw
  // less load (measured: 2.3 ms against 234 ms in collectives per step on a host at load 47).
  const std::string ref_history = dir_ + "/baseline/history.jsonl";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!baseline_exited_ && !stopping && std::chrono::steady_clock::now() < until) {
    std::ifstream in(ref_history);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("\"kind\":\"launch\"") != std::string::npos) break;
    loop_.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool SideRuns::on_exit(const ExitInfo& x) {
  if (baseline_pid_ == 0 || x.pid != baseline_pid_) return false;
  baseline_exited_ = true;
  hist_.harness("process_exit",
                {{"process", "baseline"}, {"pid", x.pid}, {"class", x.klass}, {"code", x.code}});
  return true;
}

// Waits for the reference run (unless this run was interrupted) and records what the baseline
// oracle compares: its outcome and one row per rank and step.
void SideRuns::finish_baseline(Supervisor& sup, bool interrupted) {
  if (baseline_pid_ == 0) return;
  if (!baseline_exited_ && !interrupted) {
    loop_.restart();
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(baseline_wait_s_ * 1000));
    while (!baseline_exited_ && std::chrono::steady_clock::now() < until) {
      loop_.run_for(std::chrono::milliseconds(50));
    }
  }
  const std::string rdir = dir_ + "/baseline";
  nlohmann::json d = {{"run_dir", rdir}, {"outcome", "unknown"}};
  if (!baseline_exited_) {
    d["explanation"] = interrupted
                           ? "this run was interrupted"
                           : fmt::format("it did not end within {:.0f} s", baseline_wait_s_);
    sup.mark_by_harness(baseline_pid_);
    hist_.harness("baseline", d);
    return;
  }
  const auto v = read_json_file(rdir + "/verdict.json").value_or(nlohmann::json());
  if (v.is_object()) {
    d["outcome"] = v.value("outcome", "unknown");
    d["explanation"] = v.value("harness_error", v.value("explanation", ""));
  } else {
    d["explanation"] = "it wrote no verdict (see helpers.log)";
  }
  nlohmann::json rows = nlohmann::json::array(), generations = nlohmann::json::array();
  int ranks = 0;
  // The reference's tokens, up to what one history event holds (1 MiB of data).
  size_t token_bytes = 0;
  constexpr size_t kMaxTokenBytes = 600 << 10;
  if (fs::exists(rdir + "/history.jsonl")) {
    for (const auto& e : history_with_rank_files(rdir).events) {
      if (e.source == "rank" && e.kind == "generation") {
        token_bytes += e.data_json.size();
        if (token_bytes > kMaxTokenBytes) continue;
        // What the baseline oracle's measure: tokens compares: [rank, call, prompt_len, tokens].
        const auto g = nlohmann::json::parse(e.data_json, nullptr, false);
        try {  // a field of another type leaves the call out
          if (g.is_object() && g.contains("tokens")) {
            generations.push_back(
                {e.rank, g.value("call", 0), g.value("prompt_len", 0), g["tokens"]});
          }
        } catch (const nlohmann::json::exception&) {
        }
        continue;
      }
      if (e.source != "rank" || e.kind != "step" || rows.size() >= 20000) continue;
      const auto s = nlohmann::json::parse(e.data_json, nullptr, false);
      if (s.is_discarded() || !s.is_object()) continue;
      try {  // a field of another type leaves the step out
        const double st = s.value("step_time_s", 0.0);
        rows.push_back(
            {e.rank, e.step, s.value("interval_s", st), s.value("comm_s", 0.0),
             s.contains("loss") ? s["loss"] : nlohmann::json(),
             std::max(s.value("mem_current", int64_t{-1}), s.value("mem_peak", int64_t{-1})),
             s.contains("comm_ops_s") ? s["comm_ops_s"] : nlohmann::json::array()});
        ranks = std::max(ranks, e.rank + 1);
      } catch (const nlohmann::json::exception&) {
      }
    }
  }
  d["ranks"] = ranks;
  d["steps"] = std::move(rows);
  d["generations"] = std::move(generations);
  hist_.harness("baseline", d);
}

}  // namespace fl::harness
