// `faultline score --offline`: detectors scored on recorded runs without running them again. Each
// recorded history is fed, in its order and at its recorded times compressed `speed` times, into
// a fresh history behind a real control plane (the same gRPC API a live run serves), with the
// detectors started beside it as a live run starts them; their diagnoses land in the replay's
// history, which is then scored like any run (docs/dataset.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/launch/tools.hpp"
#include "harness/score/score.hpp"

namespace fl::harness {

struct OfflineOptions {
  std::vector<std::string> paths;  // datasets (faultline export), suites or runs
  std::vector<std::string> detectors{"baseline"};
  double speed = 20;  // harness seconds per wall second while events are fed (up to 100)
  std::string results_dir = "results/replays";
  bool check_live = false;  // compare each run's scoring record with the recorded live one
  bool markdown = false;
  std::string json_path;
  std::vector<std::string> compare;  // two detectors: a paired comparison
};

struct ReplayStats {
  int events = 0;              // recorded events fed
  double recorded_s = 0;       // the recorded history's span
  double wall_s = 0;           // the replay's wall time
  bool tools_listened = true;  // every tool subscribed before the clock started
};

// Replays one recorded run directory `src` into the new directory `dst` with `tools` attached.
ReplayStats replay_run(const std::string& src, const std::string& dst,
                       const std::vector<ToolCommand>& tools, double speed);

// What a run's scoring rests on for one detector: its class, detected or not, false alarm or not,
// the alarms it raised, the first valid diagnosis's symptom, stage and ranks, and (not part of
// the comparison: it carries the tool's reaction time) its latency.
nlohmann::json scoring_record(const RunTruth& r, const std::string& detector);

// Prints the scores (and, with check_live, the comparison); returns 0, or 1 when check_live found
// a record that differs.
int score_offline(const OfflineOptions& o);

}  // namespace fl::harness
