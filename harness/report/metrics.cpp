// Suite results as Prometheus metrics in the text exposition format (version 0.0.4): what a
// node_exporter textfile collector, a Pushgateway or promtool reads. Per suite: runs by outcome,
// reproduction and fix rates per symptom, time to symptom, and, when detectors ran, each
// detector's recall, precision, latency and false alarms per clean hour.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/stats.hpp"
#include "harness/report/report.hpp"
#include "harness/score/score.hpp"
#include "harness/suite/merge.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// Families keep the order they were first declared in; their samples stay together, as the
// format requires.
class Exposition {
 public:
  void declare(const std::string& name, const std::string& type, const std::string& help) {
    if (index_.count(name)) return;
    index_[name] = families_.size();
    families_.push_back({name, type, help, {}});
  }
  void sample(const std::string& family, const std::string& name, const Labels& labels,
              double value) {
    auto it = index_.find(family);
    if (it == index_.end()) raise("metric {} sampled before it was declared", family);
    std::string line = name;
    if (!labels.empty()) {
      line += "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        line += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first,
                            escape_label(labels[i].second));
      }
      line += "}";
    }
    families_[it->second].samples.push_back(line + " " + number(value));
  }
  void sample(const std::string& name, const Labels& labels, double value) {
    sample(name, name, labels, value);
  }
  std::string text() const {
    std::string out;
    for (const auto& f : families_) {
      if (f.samples.empty()) continue;
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
      for (const auto& s : f.samples) out += s + "\n";
    }
    return out;
  }

 private:
  struct Family {
    std::string name, type, help;
    std::vector<std::string> samples;
  };
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

void declare_all(Exposition& x) {
  x.declare("faultline_suite_info", "gauge", "A suite result (value 1), labelled with its build.");
  x.declare("faultline_suite_runs", "gauge", "Runs of the suite by outcome.");
  x.declare("faultline_suite_wall_seconds", "gauge", "Wall time of the whole suite.");
  x.declare("faultline_symptom_runs", "gauge",
            "Runs per symptom and variant (faulty: the cause injected; fix: its fix applied).");
  x.declare("faultline_reproduction_ratio", "gauge",
            "Share of faulty runs of a symptom whose symptom was reproduced (0-1).");
  x.declare("faultline_fix_verified_ratio", "gauge",
            "Share of fix-variant runs of a symptom that came out clean (0-1).");
  x.declare("faultline_time_to_symptom_seconds", "summary",
            "From launch until the oracle saw the symptom, over the reproduced runs.");
  x.declare("faultline_suite_merged_directories", "gauge",
            "Merged results: the suite directories (shards) merged.");
  x.declare("faultline_suite_duplicate_cases", "gauge",
            "Merged results: cases more than one directory held (one copy kept).");
  x.declare("faultline_suite_missing_cases", "gauge",
            "Merged results: cases of the shards' plan that no directory held.");
  x.declare("faultline_suite_absent_shards", "gauge",
            "Merged results: shards of the split that no directory was given for.");
  x.declare("faultline_detector_recall", "gauge", "Detected positives / positives (0-1).");
  x.declare("faultline_detector_precision", "gauge",
            "True positives / (true positives + runs with a false alarm) (0-1).");
  x.declare("faultline_detector_f1", "gauge", "Harmonic mean of recall and precision.");
  x.declare("faultline_detector_latency_seconds", "summary",
            "From the injection of the cause until the detector's first matching diagnosis.");
  x.declare("faultline_detector_false_alarms_per_clean_hour", "gauge",
            "Diagnoses on clean runs per hour of clean running.");
  x.declare("faultline_detector_runs", "gauge", "Runs a detector was scored on, by class.");
}

// A summary family's samples: the median and 95th percentile, the sum and the count (nothing for
// no values).
void summary(Exposition& x, const std::string& family, const Labels& labels,
             const std::vector<double>& values) {
  if (values.empty()) return;
  for (double q : {0.5, 0.95}) {
    Labels lq = labels;
    lq.emplace_back("quantile", number(q));
    x.sample(family, family, lq, stats::percentile(values, q * 100));
  }
  double sum = 0;
  for (double v : values) sum += v;
  x.sample(family, family + "_sum", labels, sum);
  x.sample(family, family + "_count", labels, static_cast<double>(values.size()));
}

// Per symptom: faulty and fix runs, reproduction and fix ratios, time to symptom.
void symptom_metrics(Exposition& x, const std::string& suite, const nlohmann::json& cases) {
  struct SymptomTally {
    int faulty = 0, reproduced = 0, fix = 0, fix_clean = 0;
    std::vector<double> t_symptom;
  };
  std::map<std::string, SymptomTally> by_symptom;
  for (const auto& c : cases) {
    const std::string symptom = c.value("symptom", std::string());
    if (symptom.empty()) continue;  // clean runs have no symptom to reproduce
    const std::string outcome = c.value("outcome", std::string());
    const bool passed = outcome == "pass" || outcome == "flaky";
    SymptomTally& t = by_symptom[symptom];
    if (c.value("variant", std::string()) == "fix") {
      ++t.fix;
      t.fix_clean += passed ? 1 : 0;
    } else {
      ++t.faulty;
      if (passed) {
        ++t.reproduced;
        const double m = c.value("manifested_s", -1.0);
        if (m >= 0) t.t_symptom.push_back(m);
      }
    }
  }
  for (auto& [symptom, t] : by_symptom) {
    const Labels l{{"suite", suite}, {"symptom", symptom}};
    x.sample("faultline_symptom_runs",
             {{"suite", suite}, {"symptom", symptom}, {"variant", "faulty"}}, t.faulty);
    x.sample("faultline_symptom_runs", {{"suite", suite}, {"symptom", symptom}, {"variant", "fix"}},
             t.fix);
    if (t.faulty > 0) {
      x.sample("faultline_reproduction_ratio", l, static_cast<double>(t.reproduced) / t.faulty);
    }
    if (t.fix > 0) {
      x.sample("faultline_fix_verified_ratio", l, static_cast<double>(t.fix_clean) / t.fix);
    }
    summary(x, "faultline_time_to_symptom_seconds", l, t.t_symptom);
  }
}

// The runs to score: a suite directory's runs/, or, for a merged result (whose runs stay in
// the shards' directories), every try its cases name.
std::vector<std::string> scored_runs(const nlohmann::json& s, const std::string& dir) {
  if (!s.contains("merge")) return collect_run_dirs({dir});
  std::vector<std::string> runs;
  for (const auto& c : s["cases"]) {
    for (const auto& a : c.value("attempts", nlohmann::json::array())) {
      const std::string d = a.value("run_dir", "");
      if (!d.empty() && fs::exists(fs::path(d) / "history.jsonl")) runs.push_back(d);
    }
  }
  return runs;
}

// Detector scores, when the suite ran detectors.
void detector_metrics(Exposition& x, const std::string& suite,
                      const std::vector<std::string>& runs) {
  std::vector<RunTruth> truths;
  for (const auto& run : runs) {
    try {
      truths.push_back(load_run_truth(run));
    } catch (const std::exception&) {
      // A run directory without a history (a harness error before launch): nothing to score.
    }
  }
  for (const auto& d : score_detectors(truths)) {
    const Labels l{{"suite", suite}, {"detector", d.detector}};
    if (d.positives > 0) x.sample("faultline_detector_recall", l, d.recall());
    if (d.tp + d.fp_runs > 0) x.sample("faultline_detector_precision", l, d.precision());
    if (d.positives > 0) x.sample("faultline_detector_f1", l, d.f1());
    summary(x, "faultline_detector_latency_seconds", l, d.latency_inject_s);
    if (d.clean_hours > 0) {
      x.sample("faultline_detector_false_alarms_per_clean_hour", l, d.fp_per_hour());
    }
    for (auto [cls, n] : {std::pair{"positive", d.positives}, std::pair{"negative", d.negatives},
                          std::pair{"excluded", d.excluded}}) {
      Labels lc = l;
      lc.emplace_back("class", cls);
      x.sample("faultline_detector_runs", lc, n);
    }
  }
}

// A merged result: its shards, and the cases it holds twice or not at all.
void merge_metrics(Exposition& x, const std::string& suite, const nlohmann::json& merge) {
  if (!merge.is_object()) return;
  for (auto [key, family] : {std::pair{"shards", "faultline_suite_merged_directories"},
                             std::pair{"duplicates", "faultline_suite_duplicate_cases"},
                             std::pair{"missing", "faultline_suite_missing_cases"},
                             std::pair{"absent_shards", "faultline_suite_absent_shards"}}) {
    x.sample(family, {{"suite", suite}},
             static_cast<double>(merge.value(key, nlohmann::json::array()).size()));
  }
}

void suite_metrics(Exposition& x, const nlohmann::json& s, const std::string& dir) {
  const std::string suite = s.value("suite", fs::path(dir).filename().string());
  const auto prov = s.value("provenance", nlohmann::json::object());
  x.sample("faultline_suite_info",
           {{"suite", suite},
            {"commit", prov.value("commit", std::string())},
            {"host", prov.value("hostname", std::string())},
            {"started", prov.value("started", std::string())}},
           1);
  const auto counts = s.value("counts", nlohmann::json::object());
  for (auto& [outcome, n] : counts.items()) {
    if (n.is_number()) {
      x.sample("faultline_suite_runs", {{"suite", suite}, {"outcome", outcome}}, n.get<double>());
    }
  }
  x.sample("faultline_suite_wall_seconds", {{"suite", suite}}, s.value("wall_s", 0.0));
  symptom_metrics(x, suite, s.value("cases", nlohmann::json::array()));
  merge_metrics(x, suite, s.value("merge", nlohmann::json()));
  detector_metrics(x, suite, scored_runs(s, dir));
}

// The directories grouped by the suite they hold results of, in the order first given: results
// of one suite become one set of series (two would repeat every series, which Prometheus refuses).
std::vector<std::vector<std::string>> by_suite(const std::vector<std::string>& dirs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& d : dirs) {
    const std::string name = load_suite_summary(d).value("suite", fs::path(d).filename().string());
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == name; });
    if (it == groups.end()) {
      groups.push_back({name, {d}});
    } else {
      it->second.push_back(d);
    }
  }
  std::vector<std::vector<std::string>> out;
  for (auto& g : groups) out.push_back(std::move(g.second));
  return out;
}

}  // namespace

std::string prometheus_metrics(const std::vector<std::string>& suite_dirs) {
  Exposition x;
  declare_all(x);
  for (const auto& group : by_suite(suite_dirs)) {
    if (group.size() == 1) {
      suite_metrics(x, load_suite_summary(group[0]), group[0]);
    } else {  // merged as `faultline merge` would: the same checks, duplicates and missing cases
      const auto merged = suite_json(merge_suite_dirs(group));
      suite_metrics(x, merged, "");
    }
  }
  return x.text();
}

}  // namespace fl::harness
