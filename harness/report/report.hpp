// Reports a person would rather look at: a self-contained HTML page (no network: styles, script
// and SVG inline) for a run or a suite, and a comparison of two suite results for nightly jobs.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/markup.hpp"

namespace fl::harness {

// A run directory (timeline, charts, verdict, evidence, log links) or a suite directory
// (catalogue grid, runs, leaderboard). Writes `out` (default: report.html inside the directory)
// and returns its path. Throws Error for a directory that is neither.
std::string write_report(const std::string& dir, const std::string& out = "");
// Several suite directories (the shards of one split, or any results of one suite) merged as
// `faultline merge` merges them (harness/suite/merge.hpp), as one suite page written to `out`.
std::string write_merged_report(const std::vector<std::string>& dirs, const std::string& out);

// Text escaped for an HTML page, by the one markup escaper (base/markup.hpp).
inline std::string html_escape(std::string_view s) {
  return escape_markup(s, Markup::kHtml);
}

// A detector benchmark's threshold sweeps (leaderboard.json detectors named "hang,floor-s=2")
// as detection-vs-false-alarm curves in inline SVG, one per swept knob with two or more values;
// "" when there is none.
std::string sweep_curves_html(const nlohmann::json& leaderboard);

struct DiffOptions {
  double time_ratio = 2.0;        // time to symptom this many times slower is a regression...
  double time_min_s = 2.0;        // ...when it is also this many seconds slower
  double throughput_ratio = 0.5;  // tokens/s below this share of before is a regression
  bool outcomes_only = false;     // ignore timing and throughput (noisy machines)
};

struct DiffEntry {
  std::string kind;  // stopped_reproducing, fix_stopped_working, failing, slower_symptom,
                     // suite_throughput_drop, throughput_drop (one case: a note), missing,
                     // new, fixed_again, faster_symptom
  std::string scenario, variant, detail;
  uint64_t seed = 0;
  bool regression = false;
};

// Suite results: a suite directory (its summary.json) or a summary JSON file.
nlohmann::json load_suite_summary(const std::string& path);
// How fast the machine was during `after` relative to `before` (their reference GEMM's GFLOP/s,
// provenance.calibration.gflops); 1 when either summary lacks it.
double speed_ratio(const nlohmann::json& before, const nlohmann::json& after);
std::vector<DiffEntry> diff_suites(const nlohmann::json& before, const nlohmann::json& after,
                                   const DiffOptions& o);
std::string diff_text(const std::vector<DiffEntry>& d, const std::string& before,
                      const std::string& after);

// A run's timeline in the Trace Event Format that ui.perfetto.dev and chrome://tracing open: a
// process per rank (steps, collectives in flight, counters for loss, loss scale and memory) and
// one for the harness (faults, diagnoses, control actions). Throws Error without a history.
nlohmann::json run_trace(const std::string& run_dir);
// Writes run_trace to `out` (default: DIR/trace.json) atomically; returns the path.
std::string write_trace(const std::string& run_dir, const std::string& out = "");

// Suite results in Prometheus' text exposition format (node_exporter textfile collector,
// Pushgateway): runs by outcome, reproduction and fix rates per symptom, time to symptom, and
// each detector's recall, precision, F1, latency and false alarms per clean hour.
std::string prometheus_metrics(const std::vector<std::string>& suite_dirs);

}  // namespace fl::harness
