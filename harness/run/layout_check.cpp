#include "harness/run/layout_check.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/exit_codes.hpp"
#include "base/subprocess.hpp"
#include "harness/faults/fault.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/workload_kinds.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness {

namespace {

constexpr std::string_view kConfigLine = "faultline worker error (config): ";

// The worker's answer for one command line.
WorkerRefusal ask_worker(const std::vector<std::string>& argv) {
  static std::mutex mu;
  static std::map<std::vector<std::string>, WorkerRefusal> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(argv); it != cache.end()) return it->second;
  }
  WorkerRefusal r;
  try {
    const ToolOutcome out = run_tool_status(argv);
    // The workers' usage status: a refused configuration or command line. Any other end (a crash,
    // a signal) is the run's to report, with its logs.
    if (out.status == exit_code::kUsage) {
      for (size_t at = 0; at < out.output.size();) {
        const size_t end = std::min(out.output.find('\n', at), out.output.size());
        if (end > at) r.lines.push_back(out.output.substr(at, end - at));
        at = end + 1;
      }
      for (const auto& line : r.lines) {
        if (line.rfind(kConfigLine, 0) == 0) {
          r.message = line.substr(kConfigLine.size());
          r.klass = "config";
          break;
        }
      }
      if (r.message.empty() && !r.lines.empty()) r.message = r.lines.front();
    }
  } catch (const Error&) {
    return {};  // the worker cannot start: the run says why
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(argv, r);
  return r;
}

}  // namespace

WorkerRefusal layout_refusal(const Scenario& s) {
  const WorkloadKind& kind = workload_kind(s.workload.kind);
  if (!kind.checks_layout || s.topo.ranks < 1) return {};
  // Only this build's own worker is known to answer (a stand-in or another build named by
  // FAULTLINE_BIN_DIR may not take the flag, or may run its workload instead).
  if (worker_binary(s.workload.kind) != kind.build_path) return {};
  // An `args` fault changes the ranks' command lines at launch: the run decides.
  for (const auto& f : s.faults.oop) {
    if (f->kind == "args") return {};
  }
  // No run directory exists yet; the worker stops before it would use one. The flag goes first:
  // workload.args may end with `--`, after which the parser takes no option.
  std::vector<std::string> argv = worker_args(s, "/nonexistent/faultline-layout-check", "");
  argv.insert(argv.begin() + 1, {"--check-layout", std::to_string(s.topo.ranks)});
  return ask_worker(argv);
}

bool expects_refusal(const Scenario& s, const WorkerRefusal& refusal) {
  // The history of such a run: every rank prints the lines, reports the check's error (a parser's
  // refusal reports none) and exits 2 shortly after launch; the run then ends.
  RunSummary f;
  f.world = s.topo.ranks;
  f.t_start = 0;
  const int64_t t = 100'000'000;
  for (int r = 0; r < s.topo.ranks; ++r) {
    f.launch_t[r] = 0;
    for (const auto& line : refusal.lines) f.lines.push_back({r, t, line});
    if (!refusal.klass.empty()) f.errors.push_back({r, t, -1, refusal.klass, refusal.message});
    f.exits.push_back({r, t + 1, "error", 2, false, false});
    f.exit_t[r] = t + 1;
  }
  f.t_last = t + 1;
  f.t_end = t + 2;
  return judge(s.expect, f).outcome == "pass";
}

void check_layout_accepted(const Scenario& s) {
  const WorkerRefusal refusal = layout_refusal(s);
  if (refusal.message.empty() || expects_refusal(s, refusal)) return;
  throw ScenarioError(fmt::format(
      "{}: {}: every rank would stop before step 0 with the workers' own {}: {}. A scenario keeps "
      "what the workers refuse only when that refusal is its expectation (expect: {{oracle: "
      "error_signature, pattern: ...}} that matches it); this one expects {}{}",
      s.file, refusal.klass.empty() ? "workload.args" : "topology / workload",
      refusal.klass.empty() ? "command-line check" : "layout check", refusal.message,
      s.expect.absent ? "the absence of " : "", s.expect.oracle));
}

}  // namespace fl::harness
