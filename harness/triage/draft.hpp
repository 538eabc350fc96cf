// The drafted scenario of `faultline triage`: the closest scenario of scenarios/symptoms/ or
// scenarios/issues/ for the top symptom and root cause, adapted to what the input says (world
// size, layout, ZeRO stage, precision, launcher), each inferred value under a comment naming its
// source line; and what the draft could not express (a cause without a mechanism, a setting
// without a knob). Building the text is plain YAML work; whether it loads is asked of a validator
// the caller passes (draft_check.hpp: the scenario loader, as `faultline validate`).
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "harness/triage/triage.hpp"

namespace fl::triage {

// A scenario a draft can start from: its file and what its reference: says.
struct ScenarioSource {
  std::string path, shown;  // absolute; relative to the source tree when under it
  std::string name, symptom, root_cause, fix_pattern, cited, mechanism, description;
  // reference.needs: keys whose base values the mechanism needs ("topology.ranks"); a draft
  // leaves out an adaptation that would change one.
  std::vector<std::string> needs;
  YAML::Node doc;
};

// Every scenario with a `fix:` and a reference.symptom under `dirs` (*.yaml, sorted); a file that
// does not parse is skipped (the catalogue's own check reports it).
std::vector<ScenarioSource> load_scenario_sources(const std::vector<std::string>& dirs);
// The source tree's scenarios/symptoms and scenarios/issues.
std::vector<std::string> default_scenario_dirs();

// Something the input names that the draft does not reproduce, said plainly.
struct Unexpressed {
  // cause: the root cause or symptom has no mechanism in faultline; setting: a value read from
  // the input the scenario language has no knob for (or this machine cannot run).
  std::string kind;
  std::string text;
};

struct Draft {
  bool made = false;  // false: no answer to draft from (`why`)
  std::string why;
  std::string yaml;  // the scenario, as `faultline validate` and `repro` take it
  std::string base;  // the scenario it was adapted from (as shown)
  std::string symptom, root_cause;
  // The fl-detect-logs events of the top symptom's evidence lines, and whether the base's
  // expectation shows one of them (draft_base.hpp).
  std::vector<std::string> events;
  bool base_shows_event = false;
  std::vector<Unexpressed> unexpressed;
  // Adaptations left out, with the reason: the validator refused them, or they change a key the
  // base's mechanism needs (reference.needs).
  std::vector<std::string> dropped;
  bool cause_expressed() const;  // no `cause` item: the draft builds the named cause
};

// "" when `yaml` loads as a scenario (and with its fix applied), else the loader's error.
using Validator = std::function<std::string(const std::string& yaml)>;

// What `faultline repro` found for a scenario file: the fault reproduced its symptom, the fix
// cleared it; exit_code as repro's (2: the file did not load or the harness failed).
struct ReproOutcome {
  bool reproduced = false, verified = false;
  bool interrupted = false;  // SIGINT/SIGTERM ended a run: nothing more should start
  int exit_code = 2;
};
// Runs `faultline repro FILE` in process (harness/cli/repro.cpp); quiet: its summaries only.
using Repro = std::function<ReproOutcome(const std::string& file, bool quiet)>;

struct DraftOptions {
  int max_ranks = 8;       // this machine's CPU ranks: larger worlds are clamped
  std::string input_name;  // for the header comment ("-": standard input)
};

// The draft for `r` (triage's answer over `text`). Each adaptation is kept only when it leaves
// the keys of the base's reference.needs as the base has them and the draft still validates
// with it; any other is listed in Draft::dropped and left out.
Draft draft_scenario(const Result& r, const std::string& text, const Tables& t,
                     const std::vector<ScenarioSource>& sources, const Validator& validate,
                     const DraftOptions& o = {});
// The "Drafted scenario" and "Could not express" sections of the report.
std::string format_draft(const Draft& d);

}  // namespace fl::triage
