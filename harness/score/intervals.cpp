// The uncertainty of detector scores: each figure's 95% interval from the per-run outcomes
// (uncertainty.hpp), two detectors compared on the same runs, and recall per stage and per
// symptom with intervals.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/score/score.hpp"

namespace fl::harness {

namespace {

// F1 of the outcomes at `idx` (a resample), computed as DetectorScore::f1 does.
double f1_of(const std::vector<RunOutcome>& out, const std::vector<size_t>& idx) {
  int tp = 0, fp = 0, pos = 0;
  for (size_t i : idx) {
    const auto& o = out[i];
    pos += o.positive ? 1 : 0;
    tp += o.detected ? 1 : 0;
    fp += o.false_alarm ? 1 : 0;
  }
  const double p = tp + fp > 0 ? static_cast<double>(tp) / (tp + fp) : 0;
  const double r = pos > 0 ? static_cast<double>(tp) / pos : 0;
  return p + r > 0 ? 2 * p * r / (p + r) : 0;
}

const DetectorScore* find(const std::vector<DetectorScore>& v, const std::string& name) {
  for (const auto& s : v) {
    if (s.detector == name) return &s;
  }
  return nullptr;
}

std::string cell(const Rate& r) {
  if (r.n == 0) return "-";
  const Interval i = wilson(r.hit, r.n);
  return fmt::format("{}/{} [{:.0f}-{:.0f}%]", r.hit, r.n, 100 * i.lo, 100 * i.hi);
}

template <class Key>
std::string rate_table(const std::vector<const DetectorScore*>& cols, const std::string& head,
                       const std::set<Key>& keys, std::map<Key, Rate> DetectorScore::*field,
                       bool markdown) {
  std::string out = markdown ? "| " + head : fmt::format("{:<8}", head);
  for (auto* s : cols) out += markdown ? " | " + s->detector : fmt::format("  {:>20}", s->detector);
  out += markdown ? " |\n|---" : "\n";
  if (markdown) {
    for (size_t i = 0; i < cols.size(); ++i) out += "|---:";
    out += "|\n";
  }
  for (const auto& k : keys) {
    out += markdown ? fmt::format("| {}", k) : fmt::format("{:<8}", fmt::format("{}", k));
    for (auto* s : cols) {
      auto it = (s->*field).find(k);
      const std::string c = it == (s->*field).end() ? "-" : cell(it->second);
      out += markdown ? " | " + c : fmt::format("  {:>20}", c);
    }
    out += markdown ? " |\n" : "\n";
  }
  return out;
}

}  // namespace

ScoreIntervals score_intervals(const DetectorScore& s, const BootstrapOptions& o) {
  ScoreIntervals ci;
  ci.recall = wilson(s.tp, s.positives);
  ci.precision = wilson(s.tp, s.tp + s.fp_runs);
  ci.f1 = bootstrap(
      s.outcomes.size(), [&](const std::vector<size_t>& idx) { return f1_of(s.outcomes, idx); }, o);
  ci.latency_p50 = bootstrap_percentile(s.latency_inject_s, 50, o);
  ci.latency_p95 = bootstrap_percentile(s.latency_inject_s, 95, o);
  ci.fp_per_hour = poisson_rate(s.fp_alarms, s.clean_hours);
  return ci;
}

PairedComparison compare_detectors(const std::vector<DetectorScore>& scores, const std::string& a,
                                   const std::string& b, const BootstrapOptions& o) {
  const DetectorScore* x = find(scores, a);
  const DetectorScore* y = find(scores, b);
  if (!x || !y) {
    raise<ConfigError>("--compare {},{}: no scores for {} (detectors scored: {})", a, b, !x ? a : b,
                       [&] {
                         std::string names;
                         for (auto& s : scores) names += (names.empty() ? "" : ", ") + s.detector;
                         return names;
                       }());
  }
  PairedComparison c;
  c.a = a;
  c.b = b;
  std::map<size_t, const RunOutcome*> other;
  for (const auto& r : y->outcomes) other[r.run] = &r;
  std::vector<double> diffs;
  for (const auto& r : x->outcomes) {
    auto it = other.find(r.run);
    if (!r.positive || it == other.end()) continue;
    const bool da = r.detected, db = it->second->detected;
    (da && db ? c.both : da ? c.only_a : db ? c.only_b : c.neither) += 1;
    if (da && db) diffs.push_back(r.latency_s - it->second->latency_s);
  }
  c.mcnemar_p = mcnemar_exact(c.only_a, c.only_b);
  c.latency_pairs = static_cast<int>(diffs.size());
  if (!diffs.empty()) {
    c.latency_diff_median_s = fl::stats::median(diffs);
    c.latency_diff = bootstrap_percentile(diffs, 50, o);
  }
  return c;
}

std::string comparison_text(const PairedComparison& c, bool markdown) {
  const std::string lat =
      c.latency_pairs == 0
          ? "no run detected by both: no latency comparison"
          : fmt::format(
                "median latency difference ({} - {}) {:+.3f} s, 95% CI [{:+.3f}, {:+.3f}] "
                "(paired bootstrap, {} runs detected by both)",
                c.a, c.b, c.latency_diff_median_s, c.latency_diff.lo, c.latency_diff.hi,
                c.latency_pairs);
  return fmt::format(
      "{}{} vs {} on the same {} positive runs: both detected {}, only {} {}, only {} {}, "
      "neither {}; McNemar exact p = {:.4g}{}\n{}{}\n",
      markdown ? "**Paired comparison.** " : "", c.a, c.b, c.both + c.only_a + c.only_b + c.neither,
      c.both, c.a, c.only_a, c.b, c.only_b, c.neither, c.mcnemar_p,
      c.mcnemar_p < 0.05 ? " (the detection rates differ at the 5% level)"
                         : " (no significant difference at the 5% level)",
      markdown ? "\n" : "", lat);
}

nlohmann::json comparison_json(const PairedComparison& c) {
  return {{"a", c.a},
          {"b", c.b},
          {"both", c.both},
          {"only_a", c.only_a},
          {"only_b", c.only_b},
          {"neither", c.neither},
          {"mcnemar_exact_p", c.mcnemar_p},
          {"latency_pairs", c.latency_pairs},
          {"latency_diff_median_s", std::isnan(c.latency_diff_median_s)
                                        ? nlohmann::json(nullptr)
                                        : nlohmann::json(c.latency_diff_median_s)},
          {"latency_diff_ci95", c.latency_diff.defined()
                                    ? nlohmann::json::array({c.latency_diff.lo, c.latency_diff.hi})
                                    : nlohmann::json(nullptr)}};
}

std::string breakdown_tables(const std::vector<DetectorScore>& scores, bool markdown) {
  std::vector<const DetectorScore*> cols;
  std::set<int> stages;
  std::set<std::string> symptoms;
  for (const auto& s : scores) {
    if (s.detector.find(',') != std::string::npos) continue;  // sweep variants: their own table
    cols.push_back(&s);
    for (auto& [k, r] : s.by_stage) stages.insert(k);
    for (auto& [k, r] : s.by_symptom) symptoms.insert(k);
  }
  if (cols.empty() || stages.empty()) return "";
  std::string out = markdown ? "\nRecall per stage (detected/positives [Wilson 95% CI]):\n\n"
                             : "\nRecall per stage (detected/positives [Wilson 95% CI]):\n";
  out += rate_table<int>(cols, "stage", stages, &DetectorScore::by_stage, markdown);
  out += markdown ? "\nRecall per symptom:\n\n" : "\nRecall per symptom:\n";
  out += rate_table<std::string>(cols, "symptom", symptoms, &DetectorScore::by_symptom, markdown);
  return out;
}

}  // namespace fl::harness
