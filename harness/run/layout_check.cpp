#include "harness/run/layout_check.hpp"

#include <map>
#include <mutex>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/workload_kinds.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness {

namespace {

constexpr std::string_view kConfigLine = "faultline worker error (config): ";

// The worker's answer for one command line: "" or its refusal.
std::string ask_worker(const std::vector<std::string>& argv) {
  static std::mutex mu;
  static std::map<std::vector<std::string>, std::string> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(argv); it != cache.end()) return it->second;
  }
  std::string refusal;
  try {
    const ToolOutcome out = run_tool_status(argv);
    if (out.status != 0) {
      // Only the configuration check's own line: any other failure (a flag this worker does not
      // know, a crash) is the run's to report, with its logs.
      const auto at = out.output.find(kConfigLine);
      if (at != std::string::npos) {
        const auto from = at + kConfigLine.size();
        refusal = out.output.substr(from, out.output.find('\n', from) - from);
      }
    }
  } catch (const Error&) {
    return "";  // the worker cannot start: the run says why
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(argv, refusal);
  return refusal;
}

}  // namespace

std::string layout_refusal(const Scenario& s) {
  const WorkloadKind& kind = workload_kind(s.workload.kind);
  if (!kind.checks_layout || s.topo.ranks < 1) return "";
  // No run directory exists yet; the worker stops before it would use one.
  std::vector<std::string> argv = worker_args(s, "/nonexistent/faultline-layout-check", "");
  argv.push_back("--check-layout");
  argv.push_back(std::to_string(s.topo.ranks));
  return ask_worker(argv);
}

bool expects_refusal(const Scenario& s, const std::string& refusal) {
  // The history of such a run: every rank prints the error line, reports the error and exits 2
  // shortly after launch; the run then ends.
  RunSummary f;
  f.world = s.topo.ranks;
  f.t_start = 0;
  const int64_t t = 100'000'000;
  for (int r = 0; r < s.topo.ranks; ++r) {
    f.launch_t[r] = 0;
    f.lines.push_back({r, t, std::string(kConfigLine) + refusal});
    f.errors.push_back({r, t, -1, "config", refusal});
    f.exits.push_back({r, t + 1, "error", 2, false, false});
    f.exit_t[r] = t + 1;
  }
  f.t_last = t + 1;
  f.t_end = t + 2;
  return judge(s.expect, f).outcome == "pass";
}

void check_layout_accepted(const Scenario& s) {
  const std::string refusal = layout_refusal(s);
  if (refusal.empty() || expects_refusal(s, refusal)) return;
  throw ScenarioError(fmt::format(
      "{}: topology / workload: every rank would stop before step 0 with the workers' own layout "
      "check: {}. A scenario keeps a layout the workers refuse only when that refusal is its "
      "expectation (expect: {{oracle: error_signature, pattern: ...}} that matches it); this one "
      "expects {}{}",
      s.file, refusal, s.expect.absent ? "the absence of " : "", s.expect.oracle));
}

}  // namespace fl::harness
