// A layout every rank would refuse before its first step, found before any rank starts: the
// harness asks the workload's worker itself (`fl-train`/`fl-infer --check-layout WORLD`, the checks a
// rank makes of the layout and the model before building it), so `validate`, `run` and triage's
// drafts refuse what no run of the scenario could get past, unless the scenario expects exactly
// that refusal (scenarios/symptoms/3.2-zero2-with-pipeline.yaml).
#pragma once

#include <string>

#include "harness/model/scenario.hpp"

namespace fl::harness {

// The worker's refusal of the scenario's layout and model, as its error line says it (the part
// after `faultline worker error (config): `); "" when it accepts them, when the kind's worker has
// no such check, or when the worker cannot be started (the run then says why). Fault `args` are
// not applied: they stand for a launch that differs from the scenario's. Answers are cached per
// worker command line (a triage eval validates the same drafts' layouts many times).
std::string layout_refusal(const Scenario& s);

// Whether `refusal`, printed and reported by every rank before step 0, meets the scenario's
// expectation (an error_signature whose pattern matches it, an exit_class of error, ...): the
// oracles judge a history of exactly that.
bool expects_refusal(const Scenario& s, const std::string& refusal);

// ScenarioError naming the file, the workers' refusal and the expectation, unless the workers
// accept the layout or the scenario expects their refusal.
void check_layout_accepted(const Scenario& s);

}  // namespace fl::harness
