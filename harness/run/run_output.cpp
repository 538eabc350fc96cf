// What `faultline run` prints: the header as soon as the run directory and the control plane
// exist, then (harness/run/live.cpp) one line per notable event, and the summary at the end —
// steps in words that match the verdict, what was injected and observed, what each detector
// concluded, the verdict, and where the files are (docs/harness.md#run-output).
#include <algorithm>
#include <cstdio>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/faults/oop_faults.hpp"
#include "harness/model/workload_kinds.hpp"
#include "harness/run/run.hpp"
#include "harness/run/run_tools.hpp"
#include "harness/run/summary_lines.hpp"

namespace fl::harness::detail {

void Run::print_header(bool with_files) {
  std::printf("faultline run %s\n", id_.c_str());
  std::printf("  scenario   %s%s (%s)\n", s_.name.c_str(), o_.fix ? " [fix]" : "", s_.file.c_str());
  // A command's layout is its own business: its kind names the program instead.
  std::printf("  layout     %s\n", workload_kind(s_.workload.kind).layout_line(s_).c_str());
  if (!s_.topo.launcher_reason.empty()) {  // topology.launcher: auto
    std::printf("  launcher   %s, chosen: %s\n", s_.topo.launcher.c_str(),
                s_.topo.launcher_reason.c_str());
  }
  if (with_files) std::printf("  files      %s\n", dir_.c_str());
  std::fflush(stdout);
}

std::string Run::steps_line(const std::vector<HistoryEvent>& history) {
  int64_t last = -1;
  {
    std::lock_guard lock(step_mu_);
    for (auto& [rank, st] : max_step_) last = std::max(last, st);
  }
  const WorkloadKind& kind = workload_kind(s_.workload.kind);
  int64_t total = kind.planned_steps(s_);
  // What the ranks said they would run (their layout events): with --epochs the steps come from
  // the data, and ranks with more batches run more; the most any rank planned is the total.
  int64_t planned = -1;
  for (const auto& e : history) {
    if (e.source != "rank" || e.kind != "layout") continue;
    auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (!d.is_discarded() && d.is_object() && d.contains("steps") && d["steps"].is_number_integer())
      planned = std::max(planned, d["steps"].get<int64_t>());
  }
  if (kind.step_unit.empty() && planned > 0) total = planned;
  const std::string& unit = kind.step_unit;  // "": the label says steps
  // Each rank's last exit decides (a restarted job's earlier ends do not count).
  std::map<int, std::pair<std::string, bool>> exits;  // rank -> class, by the harness
  for (const auto& e : history) {
    if (e.source != "harness" || e.kind != "rank_exit" || e.rank < 0) continue;
    auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (!d.is_discarded()) exits[e.rank] = {d.value("class", ""), d.value("by_harness", false)};
  }
  std::vector<int> failed;
  bool all_ok = static_cast<int>(exits.size()) >= s_.topo.ranks;
  for (auto& [rank, x] : exits) {
    if (x.first != "ok") all_ok = false;
    if (x.first != "ok" && !x.second) failed.push_back(rank);
  }
  // A command's step count is its own: the steps its ranks reported.
  const bool command = !kind.own_worker();
  const std::string n =
      command ? fmt::format("{}", last + 1) : fmt::format("{} of {}{}", last + 1, total, unit);
  if (all_ok) return last + 1 >= total || command ? n : n + " (every rank finished)";
  if (!stop_reason_.empty()) {
    return fmt::format("{}, then the harness stopped the run: {}", n, stop_reason_);
  }
  if (!failed.empty()) return fmt::format("{}, then {} failed", n, ranks_phrase(failed));
  return n;
}

std::string Run::verdict_line(const RunResult& r) {
  const Verdict& v = r.verdict;
  const std::string oracle = fmt::format("oracle {}", v.oracle);
  const std::string sym = v.symptom.empty() ? "the symptom" : "symptom " + v.symptom;
  if (v.outcome == "interrupted") {
    return fmt::format("interrupted: the {} before the run ended; no verdict ({})",
                       stop_reason_.empty() ? "harness was stopped" : stop_reason_, oracle);
  }
  if (s_.expect.absent) {  // a fix variant: the symptom must stay away and the run complete
    if (v.outcome == "pass") {
      return fmt::format("pass: {} absent; all {} ranks finished ({}{})", sym, s_.topo.ranks,
                         oracle, o_.fix ? ", fix variant" : "");
    }
    if (v.outcome == "fail") {
      return v.explanation.rfind("the symptom is still there", 0) == 0
                 ? fmt::format("fail: {} is still there ({})", sym, oracle)
                 : fmt::format("fail: {} absent, but the run did not finish cleanly ({})", sym,
                               oracle);
    }
    return fmt::format("unknown: the history cannot decide ({})", oracle);
  }
  if (v.symptom.empty()) {  // a clean run, or an expectation without a symptom id
    return fmt::format("{} ({})", v.outcome, oracle);
  }
  if (v.outcome == "pass") return fmt::format("pass: {} reproduced ({})", sym, oracle);
  if (v.outcome == "fail") return fmt::format("fail: {} not reproduced ({})", sym, oracle);
  return fmt::format("unknown: the history cannot decide ({}, {})", oracle, sym);
}

void Run::print_summary(const RunResult& r, const std::vector<HistoryEvent>& history) {
  if (!o_.print_summary) return;
  if (o_.print_events) {
    std::printf("\n");
  } else {
    print_header(false);  // the files line ends the summary
  }
  // What the ranks ran (their layout events), which a fault may have made differ from the plan.
  if (const auto ran = reported_layout(history)) {
    const std::string planned =
        fmt::format("{} ranks = dp {} x tp {} x pp {}, zero {}", s_.topo.ranks, s_.topo.dp,
                    s_.topo.tp, s_.topo.pp, s_.topo.zero);
    std::printf("  %-10s %s (as the ranks reported%s)\n", "ran", ran->c_str(),
                *ran == planned ? "" : fmt::format("; the scenario says {}", planned).c_str());
  }
  std::printf("  %-10s %s\n", "steps", steps_line(history).c_str());
  const PlanReport plans = plan_report(s_.faults.plans, history);
  std::vector<std::string> lines = plans.lines;
  lines.insert(lines.end(), injected_.begin(), injected_.end());
  if (faults_) lines.insert(lines.end(), faults_->injected().begin(), faults_->injected().end());
  if (lines.empty()) lines.push_back("nothing");
  for (size_t i = 0; i < lines.size(); ++i) {
    std::printf("  %-10s %s\n", i == 0 ? "injected" : "", lines[i].c_str());
  }
  for (const auto& w : plans.warnings) std::printf("  %-10s %s\n", "warning", w.c_str());
  std::printf("  observed   %s\n", r.verdict.explanation.c_str());
  for (const auto& e : history) {  // a command job's first failure (torchelastic.hpp)
    if (e.source != "harness" || e.kind != "first_failure") continue;
    const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (!d.is_object()) continue;
    std::printf("  first      rank %d failed first (%s): %s\n", e.rank, d.value("how", "").c_str(),
                d.value("message", "").substr(0, 300).c_str());
  }
  std::vector<std::string> concluded = detector_conclusions(history);
  std::vector<std::string> silent;
  for (const auto& t : tools_->tools()) {
    if (t.recovery) continue;
    // Under its own name, or under a name it chose (its client then says which tool it is).
    const bool posted = std::any_of(history.begin(), history.end(), [&](const HistoryEvent& e) {
      if (e.kind != "diagnosis") return false;
      if (e.source == "detector:" + t.name) return true;
      const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
      return d.is_object() && d.value("tool", std::string()) == t.name;
    });
    if (!posted) silent.push_back(t.name);
  }
  if (!silent.empty()) {
    concluded.push_back(fmt::format("no diagnosis from {}", fmt::join(silent, ", ")));
  }
  for (size_t i = 0; i < concluded.size(); ++i) {
    std::printf("  %-10s %s\n", i == 0 ? "detectors" : "", concluded[i].c_str());
  }
  std::printf("  verdict    %s\n", verdict_line(r).c_str());
  if (!r.harness_error.empty()) std::printf("  harness    error: %s\n", r.harness_error.c_str());
  if (const uint64_t n = hist_->rejected(); n > 0) {
    std::printf("  rejected   %llu malformed event(s), not in the history (first: %s)\n",
                static_cast<unsigned long long>(n), hist_->rejected_reasons().front().c_str());
  }
  std::printf("  files      %s\n", dir_.c_str());
  std::fflush(stdout);
}

}  // namespace fl::harness::detail
