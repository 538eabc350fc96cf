// Tables of detector and recovery scores: fixed width for a terminal, or markdown for docs.
#include <cmath>

#include <fmt/format.h>

#include "harness/score/score.hpp"

namespace fl::harness {

namespace {

std::string pct(double x) {
  return fmt::format("{:.0f}%", 100 * x);
}

// Renders rows of cells as aligned columns or as a markdown table.
std::string render(const std::vector<std::vector<std::string>>& rows, bool markdown) {
  std::vector<size_t> w(rows[0].size(), 0);
  for (auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  std::string out;
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    for (size_t i = 0; i < r.size(); ++i) {
      if (markdown) {
        out += "| " + r[i] + " ";
      } else {
        out += i == 0 ? fmt::format("{:<{}}", r[i], w[i]) : fmt::format("  {:>{}}", r[i], w[i]);
      }
    }
    out += markdown ? "|\n" : "\n";
    if (markdown && k == 0) {
      for (size_t i = 0; i < r.size(); ++i) out += i == 0 ? "|---" : "|---:";
      out += "|\n";
    }
  }
  return out;
}

}  // namespace

namespace {

// "77% [69-83] 99/128": the value, its 95% interval and the counts it rests on.
std::string pct_ci(int k, int n, const Interval& ci) {
  if (n == 0) return "- 0/0";
  return fmt::format("{:.0f}% [{:.0f}-{:.0f}] {}/{}", 100.0 * k / n, 100 * ci.lo, 100 * ci.hi, k,
                     n);
}

std::string secs_ci(double x, const Interval& ci, size_t n) {
  if (std::isnan(x)) return "- n=0";
  return ci.defined() ? fmt::format("{:.2f} [{:.2f}-{:.2f}] n={}", x, ci.lo, ci.hi, n)
                      : fmt::format("{:.2f} n={}", x, n);
}

std::string f1_ci(const DetectorScore& s) {
  const int n = s.positives + s.negatives;
  return s.ci.f1.defined()
             ? fmt::format("{:.2f} [{:.2f}-{:.2f}] n={}", s.f1(), s.ci.f1.lo, s.ci.f1.hi, n)
             : fmt::format("{:.2f} n={}", s.f1(), n);
}

// "0 [0-55] 0 in 0.067 h": false alarms per clean hour, its exact Poisson interval, and the
// alarms and clean hours behind it.
std::string fph_ci(const DetectorScore& s) {
  if (s.clean_hours <= 0) return "- 0 h";
  return fmt::format("{:.0f} [{:.0f}-{:.0f}] {} in {:.3f} h", s.fp_per_hour(), s.ci.fp_per_hour.lo,
                     s.ci.fp_per_hour.hi, s.fp_alarms, s.clean_hours);
}

std::string rate_n(const Rate& r) {
  return r.n ? fmt::format("{} {}/{}", pct(r.value()), r.hit, r.n) : "- 0/0";
}

std::vector<std::string> score_row(const DetectorScore& s) {
  std::vector<std::string> r{
      s.detector,
      pct_ci(s.tp, s.positives, s.ci.recall),
      pct_ci(s.tp, s.tp + s.fp_runs, s.ci.precision),
      f1_ci(s),
      secs_ci(percentile(s.latency_inject_s, 50), s.ci.latency_p50, s.latency_inject_s.size()),
      secs_ci(percentile(s.latency_inject_s, 95), s.ci.latency_p95, s.latency_inject_s.size()),
      secs_ci(percentile(s.latency_manifest_s, 50), Interval{}, s.latency_manifest_s.size()),
      rate_n(s.symptom),
      rate_n(s.stage),
      rate_n(s.top1),
      s.jaccard_n ? fmt::format("{:.2f} n={}", s.jaccard(), s.jaccard_n) : "- n=0",
      fph_ci(s)};
  for (int stage = 1; stage <= 5; ++stage) {
    auto it = s.by_stage.find(stage);
    r.push_back(it == s.by_stage.end() ? "-" : fmt::format("{}/{}", it->second.hit, it->second.n));
  }
  return r;
}

}  // namespace

std::string scores_table(const std::vector<DetectorScore>& scores, bool markdown) {
  if (scores.empty()) return "no detector ran and no diagnosis was posted\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"detector", "recall", "precision", "F1", "lat p50 s", "lat p95 s",
                  "vs oracle p50", "symptom", "stage", "top-1", "jaccard", "FP/clean h", "S1", "S2",
                  "S3", "S4", "S5"});
  for (const auto& s : scores) rows.push_back(score_row(s));
  const auto& a = scores.front();
  std::string out = render(rows, markdown);
  out += fmt::format(
      "{}{} positive runs, {} clean runs ({:.3f} h), {} excluded (did not reproduce / not clean). "
      "Every cell: value [95% interval] and the counts behind it. Recall, precision: Wilson; F1, "
      "latency percentiles: percentile bootstrap over runs (2000 resamples, seed 1); FP/clean h: "
      "exact Poisson (Garwood) over the clean hours. Latency from the injection; 'vs oracle' from "
      "when the oracle saw the symptom. Sn: detected/positives of stage n.\n",
      markdown ? "\n" : "", a.positives, a.negatives, a.clean_hours, a.excluded);
  return out;
}

std::string recovery_table(const std::vector<RecoveryScore>& scores, bool markdown) {
  if (scores.empty()) return "no recovery run\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"scenario", "recovered", "restarts", "act s", "recover s", "steps lost",
                  "goodput", "vs fault-free", "final = fault-free"});
  for (const auto& s : scores) {
    rows.push_back({s.scenario, s.recovered ? "yes" : "no", std::to_string(s.restarts),
                    s.time_to_act_s < 0 ? "-" : fmt::format("{:.2f}", s.time_to_act_s),
                    s.time_to_recover_s < 0 ? "-" : fmt::format("{:.2f}", s.time_to_recover_s),
                    std::to_string(s.steps_lost), fmt::format("{:.2f}/s", s.goodput),
                    s.reference_goodput > 0 ? pct(s.goodput / s.reference_goodput) : "-",
                    s.reference_digest.empty() ? "-"
                    : s.final_state_equal      ? "bitwise"
                                               : "differs"});
  }
  return render(rows, markdown);
}

nlohmann::json recovery_json(const std::vector<RecoveryScore>& scores) {
  auto arr = nlohmann::json::array();
  for (const auto& s : scores) {
    arr.push_back({{"scenario", s.scenario},
                   {"run_dir", s.run_dir},
                   {"reference_dir", s.reference_dir},
                   {"recovered", s.recovered},
                   {"restarts", s.restarts},
                   {"time_to_act_s", s.time_to_act_s},
                   {"time_to_recover_s", s.time_to_recover_s},
                   {"steps_lost", s.steps_lost},
                   {"steps_done", s.steps_done},
                   {"goodput_steps_per_s", s.goodput},
                   {"reference_goodput_steps_per_s", s.reference_goodput},
                   {"final_digest", s.final_digest},
                   {"reference_digest", s.reference_digest},
                   {"final_state_equal", s.final_state_equal},
                   {"note", s.note}});
  }
  return arr;
}

}  // namespace fl::harness
