#include "harness/score/score.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

int stage_of(const std::string& symptom) {
  return !symptom.empty() && symptom[0] >= '1' && symptom[0] <= '5' ? symptom[0] - '0' : 0;
}

double jaccard(const std::vector<int>& a, const std::vector<int>& b) {
  std::set<int> x(a.begin(), a.end()), y(b.begin(), b.end()), u = x;
  u.insert(y.begin(), y.end());
  int inter = 0;
  for (int v : x) inter += y.count(v) ? 1 : 0;
  return u.empty() ? 0 : static_cast<double>(inter) / static_cast<double>(u.size());
}

}  // namespace

RunTruth load_run_truth(const std::string& run_dir) {
  const std::string scen = run_dir + "/scenario.yaml", hist = run_dir + "/history.jsonl";
  if (!fs::exists(scen) || !fs::exists(hist)) {
    raise<Error>("{}: not a run directory (no scenario.yaml or history.jsonl)", run_dir);
  }
  RunTruth t;
  t.run_dir = run_dir;
  const Scenario s = load_scenario(scen);
  const auto h = read_history(hist);
  const Verdict v = judge(s.expect, h);
  t.scenario = s.name;
  t.symptom = s.expect.absent ? "" : s.expect.symptom;
  t.stage = stage_of(t.symptom);
  t.ranks = v.ranks;
  if (v.outcome != "pass") {
    t.cls = "excluded";
    t.why = t.symptom.empty() ? "the clean run did not come out clean"
                              : "the symptom did not reproduce";
  } else {
    t.cls = t.symptom.empty() ? "negative" : "positive";
  }
  int64_t first_fault = -1;
  t.t_launch_ns = -1;
  for (const auto& e : h) {
    t.t_end_ns = std::max(t.t_end_ns, e.t_ns);
    if (e.kind == "run_start") {
      auto d = nlohmann::json::parse(e.data_json, nullptr, false);
      if (!d.is_discarded()) t.fix = d.value("fix", false);
    } else if (e.kind == "launch" && t.t_launch_ns < 0) {
      t.t_launch_ns = e.t_ns;
    } else if ((e.kind == "fault_fired" || e.kind == "fault_injected") && first_fault < 0) {
      first_fault = e.t_ns;
    } else if (e.kind == "tool_start") {
      auto d = nlohmann::json::parse(e.data_json, nullptr, false);
      if (!d.is_discarded() && !d.value("recovery", false)) {
        t.detectors.push_back(d.value("tool", ""));
      }
    } else if (e.kind == "diagnosis") {
      auto d = nlohmann::json::parse(e.data_json, nullptr, false);
      if (d.is_discarded()) continue;
      ScoredDiagnosis g;
      g.detector = d.value("detector", e.source.substr(e.source.find(':') + 1));
      g.symptom = d.value("symptom", "unknown");
      g.stage = d.value("stage", 0);
      if (g.stage == 0) g.stage = stage_of(g.symptom);
      if (d.contains("ranks") && d["ranks"].is_array()) {
        g.ranks = d["ranks"].get<std::vector<int>>();
      }
      g.t_ns = e.t_ns;
      g.step = e.step;
      g.confidence = d.value("confidence", 0.0);
      g.evidence = d.value("evidence", "");
      t.diagnoses.push_back(std::move(g));
    }
  }
  if (t.t_launch_ns < 0) t.t_launch_ns = 0;
  t.t_inject_ns = first_fault >= 0 ? std::max(first_fault, t.t_launch_ns) : t.t_launch_ns;
  if (v.manifested_s >= 0) {
    t.t_manifest_ns = t.t_launch_ns + static_cast<int64_t>(v.manifested_s * 1e9);
  }
  return t;
}

std::vector<std::string> collect_run_dirs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (fs::exists(fs::path(p) / "history.jsonl")) {
      out.push_back(p);
      continue;
    }
    const fs::path runs = fs::exists(fs::path(p) / "runs") ? fs::path(p) / "runs" : fs::path(p);
    if (!fs::is_directory(runs)) raise<Error>("{}: no such run or suite directory", p);
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(runs)) {
      if (fs::exists(e.path() / "history.jsonl")) found.push_back(e.path().string());
    }
    if (found.empty()) raise<Error>("{}: holds no run directory (none with a history.jsonl)", p);
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

double DetectorScore::f1() const {
  const double p = precision(), r = recall();
  return p + r > 0 ? 2 * p * r / (p + r) : 0;
}

std::vector<DetectorScore> score_detectors(const std::vector<RunTruth>& runs) {
  std::set<std::string> names;
  for (const auto& r : runs) {
    names.insert(r.detectors.begin(), r.detectors.end());
    for (const auto& d : r.diagnoses) names.insert(d.detector);
  }
  std::vector<std::string> order(names.begin(), names.end());
  if (!order.empty()) order.push_back("any");
  // "any" is the union of the detectors as configured; a sweep's variants ("hang,floor-s=2")
  // are scored on their own but stay out of it.
  auto in_any = [](const std::string& d) { return d.find(',') == std::string::npos; };
  std::vector<DetectorScore> out;
  for (const auto& name : order) {
    DetectorScore s;
    s.detector = name;
    for (const auto& r : runs) {
      if (r.cls == "excluded") {
        ++s.excluded;
        continue;
      }
      std::vector<const ScoredDiagnosis*> mine;
      for (const auto& d : r.diagnoses) {
        if ((name == "any" && in_any(d.detector)) || d.detector == name) mine.push_back(&d);
      }
      std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->t_ns < b->t_ns; });
      if (r.cls == "negative") {
        ++s.negatives;
        s.clean_hours += r.duration_s() / 3600.0;
        s.fp_alarms += static_cast<int>(mine.size());
        if (!mine.empty()) ++s.fp_runs;
        continue;
      }
      ++s.positives;
      const ScoredDiagnosis* first = nullptr;
      int early = 0;
      for (auto* d : mine) {
        if (d->t_ns < r.t_inject_ns) {
          ++early;
        } else if (!first) {
          first = d;
        }
      }
      s.early += early;
      auto& st = s.by_stage[r.stage];
      auto& sy = s.by_symptom[r.symptom];
      ++st.n;
      ++sy.n;
      if (!first) {
        ++s.fn;
        if (early > 0) ++s.fp_runs;  // it only raised alarms before anything was wrong
        continue;
      }
      ++s.tp;
      ++st.hit;
      ++sy.hit;
      s.latency_inject_s.push_back((first->t_ns - r.t_inject_ns) / 1e9);
      if (r.t_manifest_ns >= 0)
        s.latency_manifest_s.push_back((first->t_ns - r.t_manifest_ns) / 1e9);
      ++s.symptom.n;
      s.symptom.hit += first->symptom == r.symptom ? 1 : 0;
      ++s.stage.n;
      s.stage.hit += first->stage == r.stage ? 1 : 0;
      if (!r.ranks.empty()) {
        ++s.top1.n;
        s.top1.hit +=
            !first->ranks.empty() && std::count(r.ranks.begin(), r.ranks.end(), first->ranks[0]) > 0
                ? 1
                : 0;
        s.jaccard_sum += jaccard(first->ranks, r.ranks);
        ++s.jaccard_n;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

nlohmann::json scores_json(const std::vector<DetectorScore>& scores) {
  auto arr = nlohmann::json::array();
  auto num = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  for (const auto& s : scores) {
    nlohmann::json stages = nlohmann::json::object(), symptoms = nlohmann::json::object();
    for (auto& [k, r] : s.by_stage)
      stages[std::to_string(k)] = {{"detected", r.hit}, {"positives", r.n}};
    for (auto& [k, r] : s.by_symptom) symptoms[k] = {{"detected", r.hit}, {"positives", r.n}};
    arr.push_back({{"detector", s.detector},
                   {"positives", s.positives},
                   {"negatives", s.negatives},
                   {"excluded", s.excluded},
                   {"true_positives", s.tp},
                   {"false_negatives", s.fn},
                   {"false_positive_runs", s.fp_runs},
                   {"false_alarms_on_clean_runs", s.fp_alarms},
                   {"alarms_before_injection", s.early},
                   {"clean_hours", s.clean_hours},
                   {"recall", s.recall()},
                   {"precision", s.precision()},
                   {"f1", s.f1()},
                   {"latency_from_injection_s",
                    {{"p50", num(percentile(s.latency_inject_s, 50))},
                     {"p95", num(percentile(s.latency_inject_s, 95))}}},
                   {"latency_from_manifestation_s",
                    {{"p50", num(percentile(s.latency_manifest_s, 50))},
                     {"p95", num(percentile(s.latency_manifest_s, 95))}}},
                   {"symptom_accuracy", s.symptom.value()},
                   {"stage_accuracy", s.stage.value()},
                   {"localisation_top1", s.top1.value()},
                   {"localisation_jaccard", s.jaccard()},
                   {"localised_runs", s.top1.n},
                   {"false_positives_per_clean_hour", s.fp_per_hour()},
                   {"recall_by_stage", stages},
                   {"recall_by_symptom", symptoms}});
  }
  return arr;
}

}  // namespace fl::harness
