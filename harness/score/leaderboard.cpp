// Tables of detector and recovery scores: fixed width for a terminal, or markdown for docs.
#include <cmath>

#include <fmt/format.h>

#include "harness/score/score.hpp"

namespace fl::harness {

namespace {

std::string pct(double x) {
  return fmt::format("{:.0f}%", 100 * x);
}

std::string secs(double x) {
  return std::isnan(x) ? "-" : fmt::format("{:.2f}", x);
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

std::string scores_table(const std::vector<DetectorScore>& scores, bool markdown) {
  if (scores.empty()) return "no detector ran and no diagnosis was posted\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"detector", "recall", "precision", "F1", "lat p50 s", "lat p95 s",
                  "vs oracle p50", "symptom", "stage", "top-1", "jaccard", "FP/clean h", "S1", "S2",
                  "S3", "S4", "S5"});
  for (const auto& s : scores) {
    std::vector<std::string> r{s.detector,
                               pct(s.recall()),
                               pct(s.precision()),
                               fmt::format("{:.2f}", s.f1()),
                               secs(percentile(s.latency_inject_s, 50)),
                               secs(percentile(s.latency_inject_s, 95)),
                               secs(percentile(s.latency_manifest_s, 50)),
                               s.symptom.n ? pct(s.symptom.value()) : "-",
                               s.stage.n ? pct(s.stage.value()) : "-",
                               s.top1.n ? pct(s.top1.value()) : "-",
                               s.jaccard_n ? fmt::format("{:.2f}", s.jaccard()) : "-",
                               fmt::format("{:.0f}", s.fp_per_hour())};
    for (int stage = 1; stage <= 5; ++stage) {
      auto it = s.by_stage.find(stage);
      r.push_back(it == s.by_stage.end() ? "-"
                                         : fmt::format("{}/{}", it->second.hit, it->second.n));
    }
    rows.push_back(std::move(r));
  }
  const auto& a = scores.front();
  std::string out = render(rows, markdown);
  out += fmt::format(
      "{}{} positive runs, {} clean runs ({:.3f} h), {} excluded (did not reproduce / not clean). "
      "Latency from the injection; 'vs oracle' from when the oracle saw the symptom. Sn: "
      "detected/positives of stage n.\n",
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
