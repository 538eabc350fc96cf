#include "harness/triage/eval.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/score/uncertainty.hpp"
#include "harness/triage/draft_check.hpp"

namespace fl::triage {

namespace {

struct Label {
  std::string id;
  std::vector<std::string> symptoms;
  std::string root_cause;  // id, or "none"
  int stage = 0;
  bool quotes_error = false;  // input: quotes_error_text(error_lines)
};

Label label_of(const nlohmann::json& j, const Taxonomy& tax) {
  Label l;
  l.id = j.at("id").get<std::string>();
  l.symptoms = j.at("symptoms").get<std::vector<std::string>>();
  l.stage = j.at("stage").get<int>();
  const auto name = j.at("root_cause").get<std::string>();
  const auto it = tax.root_cause_by_name.find(name);
  l.root_cause = it == tax.root_cause_by_name.end() ? "none" : it->second;
  return l;
}

// Only the input fields: the labels never reach triage.
std::string input_of(const nlohmann::json& j) {
  std::string text;
  for (const char* key : {"error_lines", "env_lines"}) {
    for (const auto& line : j.at(key)) text += line.get<std::string>() + "\n";
  }
  return text;
}

// A share with its counts and its Wilson 95% interval: at these corpus sizes (tens to a few
// hundred issues) a share moves by several points between samples, and the table says how many.
std::string pct(int n, int d) {
  if (d == 0) return "-";
  const auto ci = harness::wilson(n, d);
  return fmt::format("{:.1f}% ({}/{}) [{:.0f}-{:.0f}]", 100.0 * n / d, n, d, 100.0 * ci.lo,
                     100.0 * ci.hi);
}

// Per labelled stage: how many issues, and how many right at top-1, top-3 and stage.
std::string stage_table(const EvalCounts& c) {
  std::string out = "\n| labelled stage | issues | top-1 | top-3 | stage | answered 'none' |\n";
  out += "| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (size_t s = 0; s < c.by_stage.size(); ++s) {
    const StageCounts& b = c.by_stage[s];
    if (b.issues == 0) continue;
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} |\n", s == 0 ? "0 (non-failure)" : std::to_string(s),
        b.issues, pct(b.top1, b.issues), pct(b.top3, b.issues), pct(b.stage, b.issues), b.none);
  }
  return out;
}

// The draft for one answer: validated again from its text alone, and run when asked.
std::string draft_line(const Label& l, const Result& r, const std::string& text, const Tables& t,
                       const std::vector<ScenarioSource>& sources, const EvalOptions& o,
                       EvalCounts& c) {
  if (!o.validate || r.kind != Result::Kind::kFound) return "";
  const Draft d = draft_scenario(r, text, t, sources, o.validate, {8, l.id});
  if (d.base.empty()) {
    c.cause_unexpressed += !d.cause_expressed();
    return " | no draft";
  }
  ++c.drafts;
  const bool valid = d.made && o.validate(d.yaml).empty();
  c.drafts_valid += valid;
  c.cause_unexpressed += !d.cause_expressed();
  const bool setting = std::any_of(d.unexpressed.begin(), d.unexpressed.end(),
                                   [](const Unexpressed& u) { return u.kind == "setting"; });
  c.setting_unexpressed += setting;
  c.drafts_with_event += !d.events.empty();
  c.drafts_base_shows_event += d.base_shows_event;
  std::string line =
      fmt::format(" | draft {} {}{}", d.base.substr(d.base.rfind('/') + 1),
                  valid ? "valid" : "INVALID", d.cause_expressed() ? "" : " cause-unexpressed");
  if (!d.events.empty()) {
    line += fmt::format(" event {} {}", fmt::join(d.events, "+"),
                        d.base_shows_event ? "shown" : "NOT-SHOWN");
  }
  if (valid && o.repro && d.cause_expressed() && c.repro_runs < o.repro_max &&
      !c.repro_interrupted) {
    const auto path = write_draft_temp(d.yaml, "eval");
    const ReproOutcome out = o.repro(path, true);
    std::error_code ec;
    std::filesystem::remove(path, ec);  // the run directories keep the scenario they ran
    if (out.interrupted) {
      c.repro_interrupted = true;
      return line + " repro INTERRUPTED";
    }
    ++c.repro_runs;
    c.reproduced += out.reproduced;
    c.fix_verified += out.verified;
    const bool labelled =
        std::find(l.symptoms.begin(), l.symptoms.end(), d.symptom) != l.symptoms.end();
    c.reproduced_labelled += out.reproduced && labelled;
    line += fmt::format(" repro {}{}", out.reproduced ? "REPRODUCED" : "not-reproduced",
                        out.verified ? "+fix" : "");
  }
  return line;
}

void score(const Label& l, const Result& r, EvalCounts& c, std::string* lines, bool verbose) {
  const bool none_label = l.symptoms.size() == 1 && l.symptoms[0] == "none";
  const bool answered = r.kind == Result::Kind::kFound;
  std::string top = answered ? r.symptoms.front().id : "none";
  if (none_label) {
    ++c.nones;
    c.nones_right += !answered;
  } else {
    ++c.failures;
    c.failures_answered += answered;
  }
  auto labelled = [&](const std::string& id) {
    return std::find(l.symptoms.begin(), l.symptoms.end(), id) != l.symptoms.end();
  };
  bool t1 = none_label ? !answered : answered && labelled(top);
  bool t3 = t1;
  for (size_t i = 0; answered && !none_label && i < r.symptoms.size() && i < 3; ++i) {
    t3 = t3 || labelled(r.symptoms[i].id);
  }
  // A declined answer ranks 'none' first and its two guesses after it (stop 55).
  const bool after_none =
      !answered && !none_label &&
      std::any_of(r.guesses.begin(), r.guesses.begin() + std::min<size_t>(r.guesses.size(), 2),
                  [&](const Candidate& g) { return labelled(g.id); });
  t3 = t3 || after_none;
  c.top3_after_none += after_none;
  const int stage = answered ? r.stage : 0;
  const std::string rc = answered && !r.root_causes.empty() ? r.root_causes.front().id : "none";
  c.top1 += t1;
  c.top3 += t3;
  const bool context = answered && r.basis == Result::Basis::kContext;
  const bool learned = answered && r.basis == Result::Basis::kLearned;
  c.weak_context += context;
  c.weak_context_top1 += context && t1;
  c.weak_learned += learned;
  c.weak_learned_top1 += learned && t1;
  const bool inferred = answered && r.basis == Result::Basis::kInferred;
  c.weak_inferred += inferred;
  c.weak_inferred_top1 += inferred && t1;
  c.weak_inferred_top3 += inferred && t3;
  c.quoting += l.quotes_error;
  c.quoting_top1 += l.quotes_error && t1;
  c.quoting_top3 += l.quotes_error && t3;
  c.stage += stage == l.stage;
  c.root_cause += rc == l.root_cause;
  StageCounts& b = c.by_stage.at(std::clamp(l.stage, 0, 5));
  ++b.issues;
  b.top1 += t1;
  b.top3 += t3;
  b.stage += stage == l.stage;
  b.none += !answered;
  if (verbose) {
    *lines += fmt::format("  {:<32} label {:<10} stage {} {:<5} | got {:<5} stage {} {:<5} {}",
                          l.id, fmt::format("{}", fmt::join(l.symptoms, "+")), l.stage,
                          l.root_cause, top, stage, rc,
                          t1   ? "ok"
                          : t3 ? "top3"
                               : "MISS");
    if (context) *lines += " (weak: context)";
    if (learned) *lines += " (weak: learned)";
    if (inferred) *lines += " (weak: inferred stage)";
  }
}

}  // namespace

bool quotes_error_text(const std::vector<std::string>& error_lines) {
  static const char* const kParts[] = {
      "error",     "exception",     "traceback",    "fail",    "warn",    "killed",  "timeout",
      "timed out", "out of memory", "segmentation", "abort",   "assert",  "refused", "not found",
      "no such",   "cannot",        "unable",       "invalid", "mismatch"};
  // Short words that sit inside others ("maintenance", "room", "change") count whole only.
  static const char* const kWhole[] = {"nan", "oom", "hang", "hangs", "hanging", "hung"};
  return std::any_of(error_lines.begin(), error_lines.end(), [](const std::string& line) {
    const std::string lower = ascii_lower(line);
    return std::any_of(std::begin(kParts), std::end(kParts),
                       [&](const char* w) { return lower.find(w) != std::string::npos; }) ||
           std::any_of(std::begin(kWhole), std::end(kWhole),
                       [&](const char* w) { return has_whole_word(lower, w); });
  });
}

EvalCounts evaluate(const Tables& t, const EvalOptions& o, std::string* table) {
  const auto sources =
      o.validate ? load_scenario_sources(default_scenario_dirs()) : std::vector<ScenarioSource>{};
  std::ifstream in(o.corpus);
  if (!in) throw SignatureError(fmt::format("{}: cannot open the corpus", o.corpus));
  EvalCounts c;
  std::string line, per_issue;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j;
    Label l;
    try {
      j = nlohmann::json::parse(line);
      if (o.split != "all" && j.at("split").get<std::string>() != o.split) continue;
      l = label_of(j, t.taxonomy);
      l.quotes_error = quotes_error_text(j.at("error_lines").get<std::vector<std::string>>());
    } catch (const nlohmann::json::exception& e) {
      throw SignatureError(fmt::format("{}:{}: {}", o.corpus, n, e.what()));
    }
    Input input;
    input.text = input_of(j);
    input.original_bytes = input.text.size();
    if (input.text.empty()) {
      ++c.skipped;
      continue;
    }
    ++c.issues;
    Options one;
    one.self_id = l.id;  // stop 53: an issue is never its own similar labelled issue
    const auto r = triage(input, t, one);
    score(l, r, c, &per_issue, o.verbose);
    const auto draft = draft_line(l, r, input.text, t, sources, o, c);
    if (o.verbose) per_issue += draft + "\n";
  }
  std::string& out = *table;
  out += per_issue;
  out += fmt::format("split {}: {} issues with input lines ({} without any, skipped)\n\n", o.split,
                     c.issues, c.skipped);
  out += "| measure | value (count) [Wilson 95% interval] |\n| --- | ---: |\n";
  auto row = [&](const char* what, int n, int d) {
    out += fmt::format("| {} | {} |\n", what, pct(n, d));
  };
  row("top-1 symptom", c.top1, c.issues);
  row("top-3 symptom", c.top3, c.issues);
  row("top-3 from a declined answer's guesses (ranked after 'none')", c.top3_after_none, c.issues);
  row("issues with an error word in their error lines: top-1", c.quoting_top1, c.quoting);
  row("issues with an error word in their error lines: top-3", c.quoting_top3, c.quoting);
  row("the others (no error word in their error lines): top-1", c.top1 - c.quoting_top1,
      c.issues - c.quoting);
  row("the others (no error word in their error lines): top-3", c.top3 - c.quoting_top3,
      c.issues - c.quoting);
  row("stage", c.stage, c.issues);
  row("root cause", c.root_cause, c.issues);
  row("failures answered (not 'none')", c.failures_answered, c.failures);
  row("non-failures declined ('none')", c.nones_right, c.nones);
  row("weak answers on context lines only: top-1 right", c.weak_context_top1, c.weak_context);
  row("weak answers on learned words: top-1 right", c.weak_learned_top1, c.weak_learned);
  row("weak answers on the inferred stage: top-1 right", c.weak_inferred_top1, c.weak_inferred);
  row("weak answers on the inferred stage: top-3 right", c.weak_inferred_top3, c.weak_inferred);
  if (!o.validate) return c;
  const int answers = c.failures_answered + (c.nones - c.nones_right);
  row("drafted scenarios that validate", c.drafts_valid, c.drafts);
  row("answers whose cause the draft could not express", c.cause_unexpressed, answers);
  row("drafts with a setting they could not carry", c.setting_unexpressed, c.drafts);
  row("drafts whose base shows their evidence's logs event", c.drafts_base_shows_event,
      c.drafts_with_event);
  if (o.repro_max <= 0) return c;
  row("repro: reproduced the named symptom", c.reproduced, c.repro_runs);
  row("repro: and the fix cleared it", c.fix_verified, c.repro_runs);
  row("repro: reproduced a labelled symptom", c.reproduced_labelled, c.repro_runs);
  if (c.repro_interrupted) {
    *table += fmt::format(
        "repro interrupted (SIGINT/SIGTERM) after {} finished of up to {}: the repro rows count "
        "those {}\n",
        c.repro_runs, o.repro_max, c.repro_runs);
  }
  return c;
}

int run_eval(const Tables& t, const EvalOptions& o) {
  std::string table;
  const auto c = evaluate(t, o, &table);
  std::printf("%s%s", table.c_str(), stage_table(c).c_str());
  const double d = std::max(c.issues, 1);
  int rc = 0;
  auto check = [&](const char* what, int n, double min) {
    if (100.0 * n / d + 1e-9 < min) {
      std::printf("below threshold: %s %.1f%% < %.1f%%\n", what, 100.0 * n / d, min);
      rc = 1;
    }
  };
  check("top-1", c.top1, o.min_top1);
  check("top-3", c.top3, o.min_top3);
  check("stage", c.stage, o.min_stage);
  check("root cause", c.root_cause, o.min_root_cause);
  const int answers = c.failures_answered + (c.nones - c.nones_right);
  if (o.validate && 100.0 * c.drafts + 1e-9 < o.min_drafts * answers) {
    std::printf("below threshold: drafted %d of %d answers (%.1f%% < %.1f%%)\n", c.drafts, answers,
                100.0 * c.drafts / std::max(answers, 1), o.min_drafts);
    rc = 1;
  }
  if (c.drafts_valid < c.drafts) {
    std::printf("below threshold: drafts that validate %d/%d (every draft must)\n", c.drafts_valid,
                c.drafts);
    rc = 1;
  }
  return c.repro_interrupted ? 4 : rc;
}

}  // namespace fl::triage
