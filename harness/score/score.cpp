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
  // The run ends with its last event of its own: the tools' traces (their diagnoses and exits,
  // run_ending) follow the detectors' pace, not the run's, and would make an offline replay's
  // clean hours differ from live ones.
  static const std::set<std::string> tool_trace = {"diagnosis", "tool_start", "tool_exit",
                                                   "observer_dropped", "run_ending"};
  for (const auto& e : h) {
    if (!tool_trace.count(e.kind)) t.t_end_ns = std::max(t.t_end_ns, e.t_ns);
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

namespace {

// The run directories directly in `dir`, sorted.
std::vector<std::string> runs_in(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (fs::exists(e.path() / "history.jsonl")) found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::vector<std::string> collect_run_dirs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (fs::exists(fs::path(p) / "history.jsonl")) {
      out.push_back(p);
      continue;
    }
    const fs::path runs = fs::exists(fs::path(p) / "runs") ? fs::path(p) / "runs" : fs::path(p);
    if (!fs::is_directory(runs)) raise<Error>("{}: no such run or suite directory", p);
    std::vector<std::string> found = runs_in(runs);
    if (found.empty()) {
      // A directory of suites (a soak's rounds, a campaign's batches): their runs, suite by suite.
      std::vector<fs::path> subs;
      for (const auto& e : fs::directory_iterator(runs)) {
        if (fs::is_directory(e.path() / "runs")) subs.push_back(e.path() / "runs");
      }
      std::sort(subs.begin(), subs.end());
      for (const auto& s : subs) {
        auto more = runs_in(s);
        found.insert(found.end(), more.begin(), more.end());
      }
    }
    if (found.empty()) raise<Error>("{}: holds no run directory (none with a history.jsonl)", p);
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

double DetectorScore::f1() const {
  const double p = precision(), r = recall();
  return p + r > 0 ? 2 * p * r / (p + r) : 0;
}

namespace {

// The diagnoses of detector `name` ("any": the union of the configured ones) on run `r`, earliest
// first.
std::vector<const ScoredDiagnosis*> diagnoses_of(const RunTruth& r, const std::string& name) {
  // "any" is the union of the detectors as configured; a sweep's variants ("hang,floor-s=2")
  // are scored on their own but stay out of it.
  auto in_any = [](const std::string& d) { return d.find(',') == std::string::npos; };
  std::vector<const ScoredDiagnosis*> mine;
  for (const auto& d : r.diagnoses) {
    if ((name == "any" && in_any(d.detector)) || d.detector == name) mine.push_back(&d);
  }
  std::stable_sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->t_ns < b->t_ns; });
  return mine;
}

// The accuracy and localisation of the first valid diagnosis of a detected positive.
void score_first(DetectorScore& s, const RunTruth& r, const ScoredDiagnosis& first) {
  s.latency_inject_s.push_back((first.t_ns - r.t_inject_ns) / 1e9);
  if (r.t_manifest_ns >= 0) s.latency_manifest_s.push_back((first.t_ns - r.t_manifest_ns) / 1e9);
  ++s.symptom.n;
  s.symptom.hit += first.symptom == r.symptom ? 1 : 0;
  ++s.stage.n;
  s.stage.hit += first.stage == r.stage ? 1 : 0;
  if (!r.ranks.empty()) {
    ++s.top1.n;
    s.top1.hit +=
        !first.ranks.empty() && std::count(r.ranks.begin(), r.ranks.end(), first.ranks[0]) > 0 ? 1
                                                                                               : 0;
    s.jaccard_sum += jaccard(first.ranks, r.ranks);
    ++s.jaccard_n;
  }
}

void score_run(DetectorScore& s, const RunTruth& r, size_t index) {
  if (r.cls == "excluded") {
    ++s.excluded;
    return;
  }
  const auto mine = diagnoses_of(r, s.detector);
  RunOutcome o;
  o.run = index;
  if (r.cls == "negative") {
    ++s.negatives;
    o.hours = r.duration_s() / 3600.0;
    o.alarms = static_cast<int>(mine.size());
    o.false_alarm = !mine.empty();
    s.clean_hours += o.hours;
    s.fp_alarms += o.alarms;
    if (o.false_alarm) ++s.fp_runs;
    s.outcomes.push_back(o);
    return;
  }
  ++s.positives;
  o.positive = true;
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
    o.false_alarm = early > 0;  // it only raised alarms before anything was wrong
    if (o.false_alarm) ++s.fp_runs;
    s.outcomes.push_back(o);
    return;
  }
  ++s.tp;
  ++st.hit;
  ++sy.hit;
  o.detected = true;
  o.latency_s = (first->t_ns - r.t_inject_ns) / 1e9;
  s.outcomes.push_back(o);
  score_first(s, r, *first);
}

}  // namespace

int DetectorScore::false_alarm_negatives() const {
  int n = 0;
  for (const auto& o : outcomes) n += !o.positive && o.false_alarm ? 1 : 0;
  return n;
}

std::vector<DetectorScore> score_detectors(const std::vector<RunTruth>& runs,
                                           const BootstrapOptions& o) {
  std::set<std::string> names;
  for (const auto& r : runs) {
    names.insert(r.detectors.begin(), r.detectors.end());
    for (const auto& d : r.diagnoses) names.insert(d.detector);
  }
  std::vector<std::string> order(names.begin(), names.end());
  if (!order.empty()) order.push_back("any");
  std::vector<DetectorScore> out;
  for (const auto& name : order) {
    DetectorScore s;
    s.detector = name;
    for (size_t i = 0; i < runs.size(); ++i) score_run(s, runs[i], i);
    s.ci = score_intervals(s, o);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

nlohmann::json num(double x) {
  return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x);
}

nlohmann::json interval_json(const Interval& i) {
  return i.defined() ? nlohmann::json::array({i.lo, i.hi}) : nlohmann::json(nullptr);
}

nlohmann::json rates_json(const std::map<std::string, Rate>& rates) {
  nlohmann::json out = nlohmann::json::object();
  for (auto& [k, r] : rates) {
    out[k] = {{"detected", r.hit}, {"positives", r.n}, {"ci95", interval_json(wilson(r.hit, r.n))}};
  }
  return out;
}

nlohmann::json latency_json(const std::vector<double>& v, const Interval* p50,
                            const Interval* p95) {
  nlohmann::json j = {
      {"p50", num(percentile(v, 50))}, {"p95", num(percentile(v, 95))}, {"n", v.size()}};
  if (p50) j["p50_ci95"] = interval_json(*p50);
  if (p95) j["p95_ci95"] = interval_json(*p95);
  return j;
}

}  // namespace

nlohmann::json scores_json(const std::vector<DetectorScore>& scores) {
  auto arr = nlohmann::json::array();
  for (const auto& s : scores) {
    std::map<std::string, Rate> stages;
    for (auto& [k, r] : s.by_stage) stages[std::to_string(k)] = r;
    arr.push_back(
        {{"detector", s.detector},
         {"positives", s.positives},
         {"negatives", s.negatives},
         {"excluded", s.excluded},
         {"true_positives", s.tp},
         {"false_negatives", s.fn},
         {"false_positive_runs", s.fp_runs},
         {"false_alarm_clean_runs", s.false_alarm_negatives()},
         {"false_alarms_on_clean_runs", s.fp_alarms},
         {"alarms_before_injection", s.early},
         {"clean_hours", s.clean_hours},
         {"recall", s.recall()},
         {"recall_ci95", interval_json(s.ci.recall)},
         {"precision", s.precision()},
         {"precision_n", s.tp + s.fp_runs},
         {"precision_ci95", interval_json(s.ci.precision)},
         {"f1", s.f1()},
         {"f1_n", s.positives + s.negatives},
         {"f1_ci95", interval_json(s.ci.f1)},
         {"latency_from_injection_s",
          latency_json(s.latency_inject_s, &s.ci.latency_p50, &s.ci.latency_p95)},
         {"latency_from_manifestation_s", latency_json(s.latency_manifest_s, nullptr, nullptr)},
         {"symptom_accuracy", s.symptom.value()},
         {"symptom_n", s.symptom.n},
         {"stage_accuracy", s.stage.value()},
         {"stage_n", s.stage.n},
         {"localisation_top1", s.top1.value()},
         {"localisation_jaccard", s.jaccard()},
         {"localised_runs", s.top1.n},
         {"false_positives_per_clean_hour", s.fp_per_hour()},
         {"false_positives_per_clean_hour_ci95", interval_json(s.ci.fp_per_hour)},
         {"recall_by_stage", rates_json(stages)},
         {"recall_by_symptom", rates_json(s.by_symptom)}});
  }
  return arr;
}

}  // namespace fl::harness
