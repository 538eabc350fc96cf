// A layout every rank would refuse before its first step, found before any rank starts: the
// harness asks the workload's worker itself (`fl-train`/`fl-infer --check-layout WORLD`, the checks
// a rank makes of the layout and the model before building it), so `validate`, `run` and triage's
// drafts refuse what no run of the scenario could get past, unless the scenario expects exactly
// that refusal (scenarios/symptoms/3.2-zero2-with-pipeline.yaml).
#pragma once

#include <string>
#include <vector>

#include "harness/model/scenario.hpp"

namespace fl::harness {

// What every rank would print and report before step 0 when its worker refuses the scenario's
// command line: `message` ("" when the worker accepts it) is the check's own sentence (the part
// after `faultline worker error (config): `, `klass` "config") or, for a command line the
// worker's parser rejects (a `workload.args` value out of range, a flag it does not know), the
// parser's first line (`klass` "": such a rank reports no error event, only its output).
struct WorkerRefusal {
  std::string message, klass;
  std::vector<std::string> lines;  // its stdout and stderr, as a rank would print them
};

// The worker's refusal of the scenario's layout, model and flags; an empty message when it
// accepts them, when the kind's worker has no such check, when the worker is not this build's own
// (FAULTLINE_BIN_DIR names another), when an `args` fault changes the ranks' command lines at
// launch, or when the worker cannot be started or ends otherwise (the run then says why, with its
// logs). Answers are cached per worker command line (a triage eval validates the same drafts'
// layouts many times).
WorkerRefusal layout_refusal(const Scenario& s);

// Whether that refusal, printed (and, for the check's, reported) by every rank before step 0,
// meets the scenario's expectation (an error_signature whose pattern matches it, an exit_class of
// error, ...): the oracles judge a history of exactly that.
bool expects_refusal(const Scenario& s, const WorkerRefusal& refusal);

// ScenarioError naming the file, the workers' refusal and the expectation, unless the workers
// accept the layout or the scenario expects their refusal.
void check_layout_accepted(const Scenario& s);

}  // namespace fl::harness
