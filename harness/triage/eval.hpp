// `faultline triage --eval CORPUS`: triage on each labelled issue's error_lines + env_lines only
// (never its labels), and accuracy against the labels.
#pragma once

#include <array>
#include <string>

#include "harness/triage/draft.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

struct EvalOptions {
  std::string corpus, split = "tune";  // "tune", "test" or "all"
  double min_top1 = 0, min_top3 = 0, min_stage = 0, min_root_cause = 0;
  double min_drafts = 0;  // % of the answers given (failures and wrongly answered non-failures)
  bool verbose = false;   // one line per issue
  // Drafts: each answer's drafted scenario is checked with `validate` (none: no drafts counted);
  // `repro` runs up to `repro_max` of those whose cause the draft expresses.
  Validator validate;
  Repro repro;
  int repro_max = 0;
};

// One labelled stage's share of an evaluation (0: the non-failures).
struct StageCounts {
  int issues = 0, top1 = 0, top3 = 0, stage = 0, none = 0;  // none: answered "none"
};

struct EvalCounts {
  std::array<StageCounts, 6> by_stage{};  // by the label's stage
  int issues = 0, skipped = 0;            // skipped: no input lines at all
  int top1 = 0, top3 = 0, stage = 0, root_cause = 0;
  int failures = 0, failures_answered = 0;  // labelled failures, and those triage answered
  // Stop 55: labelled failures triage declined whose label is one of the two symptoms ranked
  // after 'none' (Result::guesses); each is in top3, never in top1.
  int top3_after_none = 0;
  // Stop 55: issues with an error word in an error line (quotes_error_text), and top-1 / top-3
  // right among them.
  int quoting = 0, quoting_top1 = 0, quoting_top3 = 0;
  int nones = 0, nones_right = 0;  // labelled non-failures, and those it declined
  // Weak answers (Result::Basis): on context lines only, or on learned words; and of those, the
  // ones whose top symptom is right.
  int weak_context = 0, weak_context_top1 = 0, weak_learned = 0, weak_learned_top1 = 0;
  // Answers on the inferred stage (no signature reached an answer): top-1 and top-3 right.
  int weak_inferred = 0, weak_inferred_top1 = 0, weak_inferred_top3 = 0;
  // Drafts: answers with a base scenario, those whose text validates, those with a cause the
  // draft could not express, and those with a setting it could not carry.
  int drafts = 0, drafts_valid = 0, cause_unexpressed = 0, setting_unexpressed = 0;
  // Drafts whose top symptom's evidence holds an fl-detect-logs event, and those whose base's
  // expectation shows one of those events (draft_base.hpp).
  int drafts_with_event = 0, drafts_base_shows_event = 0;
  // repro on expressible drafts: run, reproduced the named symptom, fix verified, and reproduced
  // one of the issue's labelled symptoms.
  int repro_runs = 0, reproduced = 0, fix_verified = 0, reproduced_labelled = 0;
  // SIGINT/SIGTERM ended a repro: no further repro starts, the shares count the finished ones and
  // run_eval exits 4.
  bool repro_interrupted = false;
};

// Whether one of `error_lines` holds an error word (any case: error, exception, traceback, fail,
// warn, killed, timeout, timed out, out of memory, segmentation, abort, assert, refused, not
// found, no such, cannot, unable, invalid, mismatch; and the whole words nan, oom, hang, hangs,
// hanging, hung): the table's split of the corpus into reports that quote the failure and
// reports that only tell it.
bool quotes_error_text(const std::vector<std::string>& error_lines);
// Throws SignatureError on an unreadable corpus line ("corpus:line: problem").
EvalCounts evaluate(const Tables& t, const EvalOptions& o, std::string* table);
// 0 when every threshold is met, 1 otherwise (the table says which).
int run_eval(const Tables& t, const EvalOptions& o);

}  // namespace fl::triage
