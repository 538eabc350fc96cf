// Workload kinds: what `workload.kind` names. Each says which worker runs it (its options come
// from that worker's declarations, worker_options.hpp), what the harness adds to the forwarded
// options when it launches one (the topology, paths in the run directory, what to resume from),
// how a run's summary names it and counts its steps, and whether restart_job may relaunch it.
// A new kind is one entry in workload_kinds.cpp (and its worker in cmake's WORKLOAD_WORKERS).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/scenario.hpp"

namespace fl::harness {

struct WorkloadKind {
  std::string name;
  std::string summary;       // the schema's words for it
  std::string binary;        // the worker the harness launches; "": the scenario's command
  std::string build_path;    // that worker in this build
  bool restartable = false;  // restart_job may relaunch its ranks with more arguments
  // The arguments beyond the forwarded workload keys.
  void (*launch_args)(const Scenario& s, const std::string& run_dir, const std::string& resume_from,
                      std::vector<std::string>& out) = nullptr;
  // The run header's layout line, after "layout     ".
  std::string (*layout_line)(const Scenario& s) = nullptr;
  // The steps a run plans (its ranks' layout events may say more) and their unit in the summary.
  int64_t (*planned_steps)(const Scenario& s) = nullptr;
  std::string step_unit;  // "" (steps), " positions"
  // Its worker answers `--check-layout WORLD` (the checks a rank makes of the layout and the model
  // before building it, without joining a world): `validate` and `run` ask it first.
  bool checks_layout = false;

  bool own_worker() const { return !binary.empty(); }
};

const std::vector<const WorkloadKind*>& workload_kinds();
std::vector<std::string> workload_kind_names();
// Throws ScenarioError for a name no kind has.
const WorkloadKind& workload_kind(const std::string& name);

}  // namespace fl::harness
