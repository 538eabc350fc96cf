// faultline triage's answer as text (`format_result`): what it read, the stage and confidence, the
// ranked symptom and root-cause candidates with their evidence, and under a candidate faultline
// produces, its scenarios and the lines its runs print.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/triage/dialect.hpp"
#include "harness/triage/ranker_neighbours.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

namespace {

std::string clip(const std::string& s, size_t n = 160) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

void format_env(std::string& out, const Result& r) {
  out += "What it read:\n";
  if (r.env.empty()) out += "  (no framework, version, launcher or layout line)\n";
  for (const auto& e : r.env) {
    out += fmt::format("  {:<14} {:<20} line {}: {}\n", e.key, e.value, e.line, clip(e.text, 100));
  }
  if (r.truncated) out += "  note: the input was over the size limit; only its tail was read\n";
  out += fmt::format("  ({} lines)\n", r.lines);
}

// What fl-detect-logs reads a signature as: "4.7 training, 5.1 serving, 2.2 before the first step".
std::string reads_as(const dialect::Match& m) {
  std::string s = fmt::format("{} training, {} serving", m.train, m.serve);
  if (!m.before_first.empty()) s += fmt::format(", {} before the first step", m.before_first);
  return s;
}

// Under a candidate faultline produces: its scenarios, and per event the evidence reports, the
// fl-detect-logs signature and the lines faultline's runs print for it in each dialect.
// An event already printed under an earlier candidate is named, not printed again (`shown`).
void format_faultline(std::string& out, const dialect::Produced& p, std::set<std::string>& shown) {
  if (p.empty()) return;
  std::string line = fmt::format("       faultline: scenarios {}", fmt::join(p.scenarios, ", "));
  if (p.more_scenarios > 0) line += fmt::format(" (+{} more)", p.more_scenarios);
  for (size_t i = 0; i < p.matches.size(); ++i) {
    const auto& m = p.matches[i];
    const bool again = !shown.insert(m.signature).second;
    const char* shown_as = !m.no_producer.empty() ? "not printed by faultline"
                           : again                ? "printed as above"
                                                  : "printed as";
    line += fmt::format("{}line {} is fl-detect-logs signature '{}' ({}), {}\n",
                        i == 0 ? "; " : "         ", m.line, m.signature, reads_as(m), shown_as);
    out += std::exchange(line, std::string());
    if (again) continue;
    if (!m.no_producer.empty()) {
      out += fmt::format("         (no line) faultline has no producer of this event: {}\n",
                         m.no_producer);
    } else if (m.pytorch == m.faultline) {
      out += fmt::format("         (both dialects) {}\n", clip(m.faultline));
    } else {
      out += fmt::format("         (workload.fidelity: pytorch) {}\n", clip(m.pytorch));
      out += fmt::format("         (faultline) {}\n", clip(m.faultline));
    }
  }
}

void format_candidates(std::string& out, const std::vector<Candidate>& cs,
                       const std::map<std::string, std::string>& names, size_t n) {
  std::set<std::string> shown;  // events whose faultline lines are printed
  for (size_t i = 0; i < cs.size() && i < n; ++i) {
    const auto& c = cs[i];
    const auto it = names.find(c.id);
    out += fmt::format("  {}. {:<5} {:<40} score {:.2f}\n", i + 1, c.id,
                       it == names.end() ? "" : it->second, c.score);
    if (!c.basis.empty()) out += fmt::format("       from: {}\n", c.basis);
    for (const auto& e : c.evidence) {
      out += fmt::format("       line {} [{}]: {}\n", e.line, e.signature, clip(e.text));
    }
    format_faultline(out, c.faultline, shown);
  }
}

}  // namespace

std::string format_result(const Result& r, const Tables& t) {
  std::string out;
  if (r.kind != Result::Kind::kFound) {
    out += fmt::format("no distributed-failure signature found: {}\n", r.why);
    if (r.kind == Result::Kind::kBinary || r.kind == Result::Kind::kEmpty) return out;
    format_env(out, r);
    if (!r.symptoms.empty()) {
      out += "Weak matches (below the threshold):\n";
      format_candidates(out, r.symptoms, t.taxonomy.symptom_name, 3);
    }
    if (!r.guesses.empty()) {  // stop 55: 'none' ranks first, these after it
      const int stage = t.taxonomy.symptom_stage.at(r.guesses.front().id);
      out += fmt::format(
          "If it is a failure after all (ranked after 'none'; weak: the answer the words would "
          "give, first in stage {} {}):\n",
          stage, t.taxonomy.stage_name.at(stage));
      format_candidates(out, r.guesses, t.taxonomy.symptom_name, 2);
    }
    return out + format_similar(r.similar);
  }
  format_env(out, r);
  out += fmt::format("Stage: {} {}\n", r.stage, t.taxonomy.stage_name.at(r.stage));
  if (r.basis == Result::Basis::kContext) {
    out += "Confidence: weak (no error text matched; the answer rests on context lines only)\n";
  } else if (r.basis == Result::Basis::kLearned) {
    out +=
        "Confidence: weak (no table signature matched; the answer rests on words learned "
        "from the corpus's tune split)\n";
  } else if (r.basis == Result::Basis::kInferred && !r.overruled.empty()) {
    out += fmt::format("Confidence: weak ({})\n", overruled_note(r));
  } else if (r.basis == Result::Basis::kInferred) {
    out +=
        "Confidence: weak (no signature reached an answer; the stage is inferred from the words "
        "shown, the candidates are that stage's common symptoms on the corpus's tune split)\n";
  }
  out += "Symptom candidates:\n";
  format_candidates(out, r.symptoms, t.taxonomy.symptom_name, 5);
  out += "Root-cause candidates:\n";
  if (r.root_causes.empty()) out += "  (no root-cause evidence)\n";
  format_candidates(out, r.root_causes, t.taxonomy.root_cause_name, 3);
  return out + format_similar(r.similar);
}

}  // namespace fl::triage
