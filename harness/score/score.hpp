// Scoring detectors and recovery against ground truth. Everything here is a pure function of run
// directories (scenario.yaml + history.jsonl): `faultline score` re-scores any run offline.
//
// A run is a positive when its scenario expects a symptom and the oracle saw it (verdict pass), a
// negative when it expects none (a clean run, or a fix variant with expect.absent) and the run
// came out clean; any other run is excluded (a symptom that did not reproduce has no truth to
// score against). A diagnosis counts on a positive from the moment the fault was injected (the
// first fault_fired / fault_injected; the first launch when the cause is the configuration);
// one before that is a false alarm.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/stats.hpp"
#include "harness/score/uncertainty.hpp"

namespace fl::harness {

struct ScoredDiagnosis {
  std::string detector, symptom, evidence;
  int stage = 0;
  std::vector<int> ranks;
  int64_t t_ns = 0, step = -1;
  double confidence = 0;
};

struct RunTruth {
  std::string run_dir, scenario, symptom;  // symptom: the expected one ("" on a clean run)
  std::string cls;                         // positive, negative, excluded
  std::string why;                         // why excluded
  bool fix = false;
  int stage = 0;
  int64_t t_launch_ns = 0, t_inject_ns = 0, t_manifest_ns = -1, t_end_ns = 0;
  std::vector<int> ranks;              // where the oracle localised the symptom
  std::vector<std::string> detectors;  // detectors that ran (tool_start), recovery tools apart
  std::vector<ScoredDiagnosis> diagnoses;
  double duration_s() const { return (t_end_ns - t_launch_ns) / 1e9; }
};

// Judges the run again from its history and collects what the scorer needs. Throws Error for a
// directory without scenario.yaml or history.jsonl.
RunTruth load_run_truth(const std::string& run_dir);

// Run directories under each path: a run directory itself, or a suite directory (its runs/).
std::vector<std::string> collect_run_dirs(const std::vector<std::string>& paths);

struct Rate {
  int hit = 0, n = 0;
  double value() const { return n > 0 ? static_cast<double>(hit) / n : 0; }
};

// One scored run as one detector saw it: what the intervals resample and the paired tests pair.
struct RunOutcome {
  size_t run = 0;            // index into the runs scored
  bool positive = false;     // else a negative (excluded runs have no outcome)
  bool detected = false;     // positive: a diagnosis at or after the injection
  bool false_alarm = false;  // negative: any diagnosis; positive: only alarms before injection
  int alarms = 0;            // negative: its diagnoses
  double hours = 0;          // negative: its duration
  double latency_s = std::nan("");  // detected: from the injection
};

// The 95% intervals of a detector's figures (uncertainty.hpp says how each is made).
struct ScoreIntervals {
  Interval recall, precision, f1, latency_p50, latency_p95, fp_per_hour;
};

struct DetectorScore {
  std::string detector;
  int positives = 0, negatives = 0, excluded = 0;
  int tp = 0, fn = 0, fp_runs = 0, fp_alarms = 0, early = 0;
  double clean_hours = 0;
  std::vector<double> latency_inject_s, latency_manifest_s;
  Rate symptom, stage, top1;
  double jaccard_sum = 0;
  int jaccard_n = 0;
  std::map<int, Rate> by_stage;            // recall per taxonomy stage
  std::map<std::string, Rate> by_symptom;  // recall per symptom
  std::vector<RunOutcome> outcomes;        // per scored run, in run order
  ScoreIntervals ci;
  int false_alarm_negatives() const;  // negatives with an alarm
  double recall() const { return positives > 0 ? static_cast<double>(tp) / positives : 0; }
  double precision() const {
    return tp + fp_runs > 0 ? static_cast<double>(tp) / (tp + fp_runs) : 0;
  }
  double f1() const;
  double fp_per_hour() const { return clean_hours > 0 ? fp_alarms / clean_hours : 0; }
  double jaccard() const { return jaccard_n > 0 ? jaccard_sum / jaccard_n : 0; }
};

// One score per detector seen in `runs` (sorted by name), plus "any": the union of all of them,
// each with its 95% intervals (bootstrap resamples and seed from `o`).
std::vector<DetectorScore> score_detectors(const std::vector<RunTruth>& runs,
                                           const BootstrapOptions& o = {});
// The intervals of one score from its outcomes (score_detectors calls it).
ScoreIntervals score_intervals(const DetectorScore& s, const BootstrapOptions& o);

// Two detectors on the same runs: McNemar's exact test on the positives one detected and the
// other missed, and a paired bootstrap of the median latency difference (a - b) on the runs both
// detected.
struct PairedComparison {
  std::string a, b;
  int both = 0, only_a = 0, only_b = 0, neither = 0;  // positives
  double mcnemar_p = 1;
  int latency_pairs = 0;
  double latency_diff_median_s = std::nan("");
  Interval latency_diff;
};
PairedComparison compare_detectors(const std::vector<DetectorScore>& scores, const std::string& a,
                                   const std::string& b, const BootstrapOptions& o = {});
std::string comparison_text(const PairedComparison& c, bool markdown);
nlohmann::json comparison_json(const PairedComparison& c);

// Recall per stage and per symptom, one column per detector, each cell "hit/n [95% CI]".
std::string breakdown_tables(const std::vector<DetectorScore>& scores, bool markdown);

// p-th percentile (0-100) by linear interpolation; NaN for an empty list.
using fl::stats::percentile;

nlohmann::json scores_json(const std::vector<DetectorScore>& scores);
// A fixed-width table (terminal) or a markdown table, one row per detector, a column per stage.
std::string scores_table(const std::vector<DetectorScore>& scores, bool markdown);

struct RecoveryScore {
  std::string run_dir, reference_dir, scenario;
  bool recovered = false;  // the last incarnation finished cleanly on every rank
  int restarts = 0;
  double time_to_recover_s = -1;  // injection -> first step after the restart
  double time_to_act_s = -1;      // injection -> the recovery tool's restart_job
  int64_t steps_lost = 0;         // steps computed again after the restart
  int64_t steps_done = 0;         // distinct steps finished
  double goodput = 0;             // steps_done / wall seconds
  double reference_goodput = 0;   // the fault-free run's
  std::string final_digest, reference_digest;
  bool final_state_equal = false;  // parameters bitwise equal to the fault-free run's
  std::string note;
};

// `reference_dir`: the fault-free run of the same scenario and seed ("" : none).
RecoveryScore score_recovery(const std::string& run_dir, const std::string& reference_dir);
nlohmann::json recovery_json(const std::vector<RecoveryScore>& scores);
std::string recovery_table(const std::vector<RecoveryScore>& scores, bool markdown);

}  // namespace fl::harness
