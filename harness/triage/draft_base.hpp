// The base scenario of a drafted scenario (draft.cpp): among the scenarios of the top symptom,
// the one whose root cause the tables name, then the one whose expectation shows the event the
// issue reports (an OOM, a collective timeout, a checkpoint error: the fl-detect-logs event of
// the top candidate's evidence lines, dialect::classify), then what it shares with the input.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "harness/triage/draft.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

// The fl-detect-logs events of a candidate's evidence lines ("oom", "comm timeout", ...), in the
// order of the lines, each once.
std::vector<std::string> evidence_events(const Candidate& c);

// The oracle kinds whose verdict is the event itself ("oom" -> oom; "comm timeout" ->
// comm_timeout, hang; a checkpoint event -> checkpoint_error; ...); empty when no oracle kind
// alone shows it (an error_signature's pattern may).
const std::vector<std::string>& oracles_showing(const std::string& event);

// Whether `expect` (a scenario's expect: map) shows `event`: its oracle is one of
// oracles_showing(event), or its pattern (error_signature, oom, checkpoint_error, first_failure)
// is read by fl-detect-logs as that event (dialect::classify on the pattern, else on
// pattern_text(pattern)), or, for any
// and all, one of the expectations it combines does. An inverted one (absent: true) shows none.
bool expect_shows(const YAML::Node& expect, const std::string& event);

// A text an error_signature pattern matches, near enough for dialect::classify, for the simple
// patterns scenarios write: escapes undone (`\(` is `(`, `\s`, `\n` and `\t` a blank, another
// class escape such as `\d` nothing), a group of plain alternatives replaced by its first
// (`creat(e|ing)` is `create`), `^`, `$`, `?`, `*` and `+` dropped; the rest (`.`, `[0-9]`,
// `{16}`) is copied as it is.
std::string pattern_text(const std::string& pattern);

// What the input says that the base should share.
struct BaseQuery {
  std::optional<int> zero_stage;        // the ZeRO stage read (0 when it was not a number)
  std::optional<std::string> launcher;  // the launcher read
  bool moe_input = false;               // the input mentions MoE, experts or Mixtral
  // The frameworks the input names (whole words "deepspeed", "megatron"), as a base's
  // workload.versions names the framework its mechanism is in.
  std::vector<std::string> frameworks;
};

// Weights of choose_base's score (docs/triage.md, "The drafted scenario"). The event weighs
// less than the top root cause and more than the second, the third, and the ZeRO stage, launcher
// and folder together (on the tune split every weight from 1.25 to 3 chose the same bases; 5,
// above the top root cause, gave 2 watchdog drafts a base that shows the timeout but lost their
// root cause, R2.3, which both were labelled with).
struct BaseWeights {
  double root_cause = 4;  // the top root cause; the second half of it, the third a third
  double event = 3;       // the base's expectation shows an event of the evidence
  // A base of the top root cause whose expect.pattern matches one of the top symptom's
  // evidence lines: it prints the error the issue quotes (of two bases of that cause, the one of
  // that error; counted for no other cause's base).
  double pattern = 2.5;
  double zero = 1, launcher = 0.5, symptoms_dir = 0.25;
  // A base whose mechanism is one framework's (its workload.versions states DeepSpeed's or
  // Megatron's version) loses this when the input names another framework and never its own.
  double other_framework = 0.5;
};

// The scenario of `sources` for r's top symptom with the highest score (the first by file name
// among equals); nullptr when none has that symptom. A base that trains an MoE model loses half
// the top root cause's weight when the input never mentions MoE; one of another framework than
// the input names loses other_framework.
const ScenarioSource* choose_base(const Result& r, const std::vector<ScenarioSource>& sources,
                                  const BaseQuery& q, const BaseWeights& w = {});

// The first sentence (of 60 characters at least) of a description: what a stands-for reference
// says the draft builds.
std::string first_sentence(std::string s);

// A URL of a GitHub issue or pull request in the input (the first): the draft then cites it.
struct Thread {
  std::string kind, id, url;  // kind "issue" or "pr"; id "owner/repo#N"
  size_t line = 0;
  std::string text;
};
Thread find_thread(const std::string& text);

}  // namespace fl::triage
