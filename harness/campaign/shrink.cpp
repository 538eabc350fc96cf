// Shrinking a run: find its violation, then try smaller scenarios one real run at a time — ddmin
// over the faults, fewer ranks, fewer steps, a smaller model — keeping each reduction whose run
// shows the same violation, until nothing smaller does or the run budget is spent.
#include "harness/campaign/shrink.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "harness/campaign/ddmin.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/scenario.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/run/layout_check.hpp"
#include "harness/run/runner.hpp"
#include "harness/scenario/loader.hpp"
#include "harness/score/score.hpp"
#include "harness/suite/suite.hpp"
#include "injector/plan.hpp"

namespace fl::harness::campaign {

namespace fs = std::filesystem;

const std::vector<std::string>& property_names() {
  static const std::vector<std::string> names = {"no_verdict", "recovery_failed", "detector_missed",
                                                 "expectation_failed"};
  return names;
}

namespace {

std::string no_verdict(const nlohmann::json& v) {
  if (!v.is_object()) return "no verdict.json";
  if (v.value("state", "") == "running") return "verdict.json still says running";
  if (v.contains("harness_error")) return "harness error: " + v.value("harness_error", "");
  if (v.value("outcome", "") == "unknown") return "unknown: " + v.value("explanation", "");
  return "";
}

// The symptoms that showed in a positive run: its expectation's, or for `any` / `all` (a
// campaign run with several faults) those of the combined expectations that pass.
std::set<std::string> shown_symptoms(const std::string& run_dir) {
  const Scenario s = load_scenario(run_dir + "/scenario.yaml");
  if (s.expect.of.empty()) return {s.expect.symptom};
  const auto history = history_with_rank_files(run_dir).events;
  std::set<std::string> out;
  for (const auto& x : s.expect.of) {
    if (!x.symptom.empty() && judge(x, history).outcome == "pass") out.insert(x.symptom);
  }
  return out;
}

// The detectors that ran on a positive run and diagnosed none of the symptoms that showed.
std::vector<std::string> missed_by(const std::string& run_dir) {
  const RunTruth t = load_run_truth(run_dir);
  std::vector<std::string> out;
  if (t.cls != "positive") return out;
  const std::set<std::string> shown = shown_symptoms(run_dir);
  for (const auto& d : t.detectors) {
    const bool seen = std::any_of(t.diagnoses.begin(), t.diagnoses.end(), [&](auto& g) {
      return g.detector == d && shown.count(g.symptom) > 0;
    });
    if (!seen) out.push_back(d);
  }
  return out;
}

// A violation found: its name (detector_missed:D names the detector) and a sentence.
struct Found {
  std::string name, why;
};

Found check_one(const std::string& run_dir, const std::string& p, const nlohmann::json& v) {
  if (p == "no_verdict") return {p, no_verdict(v)};
  if (!v.is_object() || !no_verdict(v).empty()) return {};
  if (p == "expectation_failed") {
    if (v.value("outcome", "") != "fail") return {};
    return {p, "fail: " + v.value("explanation", "")};
  }
  if (p == "recovery_failed") {
    const YAML::Node s = YAML::LoadFile(run_dir + "/scenario.yaml");
    if (!s["recovery"] || s["recovery"].Scalar().empty()) return {};
    const RecoveryScore r = score_recovery(run_dir, "");
    if (r.recovered) return {};
    return {p, fmt::format("recovery {} did not recover: {}", s["recovery"].Scalar(), r.note)};
  }
  const std::string want = p.rfind("detector_missed:", 0) == 0 ? p.substr(16) : "";
  for (const auto& d : missed_by(run_dir)) {
    if (want.empty() || d == want) {
      return {"detector_missed:" + d,
              fmt::format("detector {} diagnosed none of the symptoms that showed", d)};
    }
  }
  return {};
}

}  // namespace

std::string violation_of(const std::string& run_dir, const std::string& property,
                         std::string* why) {
  const auto v = read_json_file(run_dir + "/verdict.json").value_or(nlohmann::json());
  std::vector<std::string> order = property_names();
  if (!property.empty()) order = {property};
  for (const auto& p : order) {
    const Found found = check_one(run_dir, p, v);
    if (found.why.empty()) continue;
    if (why) *why = found.why;
    return found.name;
  }
  return "";
}

namespace {

std::string candidate_yaml(const YAML::Node& doc, const std::string& header) {
  YAML::Emitter out;
  out << YAML::Comment(header) << YAML::Newline << doc;
  return std::string(out.c_str()) + "\n";
}

// Runs candidate scenarios one at a time and keeps the smallest that still shows the violation.
class Shrinker {
 public:
  Shrinker(const ShrinkOptions& o, std::string property, std::string work)
      : o_(o), property_(std::move(property)), work_(std::move(work)) {
    bin_ = o.faultline_bin.empty() ? fs::read_symlink("/proc/self/exe").string() : o.faultline_bin;
  }

  // 1: the candidate shows the violation (and becomes the current scenario); 0: it does not, or
  // it does not load; -1: the budget is spent.
  int attempt(const YAML::Node& doc, const std::string& what) {
    if (runs_ >= o_.max_runs) {
      exhausted_ = true;
      return -1;
    }
    const std::string id = fmt::format("c{:03d}", runs_ + skipped_ + 1);
    const std::string file = work_ + "/candidates/" + id + ".yaml";
    write_atomic(file, candidate_yaml(doc, fmt::format("shrink candidate {}: {}", id, what)));
    try {
      check_layout_accepted(load_scenario(file));  // stop 63: a layout every rank would refuse
    } catch (const std::exception& e) {
      ++skipped_;
      note(fmt::format("{} {}: skipped, does not load or every rank would refuse it: {}", id, what,
                       e.what()));
      return 0;
    }
    ++runs_;
    const std::string run_dir = run_candidate(file, id, doc);
    std::string why;
    const bool holds = violation_of(run_dir, property_, &why) == property_;
    note(fmt::format("{} {}: {}", id, what, holds ? "still " + property_ : "violation gone"));
    return holds ? 1 : 0;
  }

  int runs() const { return runs_; }
  bool exhausted() const { return exhausted_; }
  std::vector<std::string> log;

 private:
  void note(const std::string& line) {
    log.push_back(line);
    if (o_.progress) std::fprintf(stderr, "shrink: %s\n", line.c_str());
  }

  // `faultline run FILE` into WORK/runs/ID; the run enforces its own timeouts.run_s, and this
  // wait gives up (SIGTERM, then SIGKILL) at three times that plus a minute.
  std::string run_candidate(const std::string& file, const std::string& id, const YAML::Node& doc) {
    const std::string runs = work_ + "/runs";
    const pid_t pid = spawn_logged({bin_, "run", file, "--results", runs, "--run-id", id, "-q"},
                                   runs + "/" + id + ".log");
    const double run_s =
        doc["timeouts"] && doc["timeouts"]["run_s"] ? doc["timeouts"]["run_s"].as<double>() : 120.0;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>((3 * run_s + 60) * 1000));
    int st = 0;
    bool termed = false;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, termed ? SIGKILL : SIGTERM);
        termed = true;
        std::this_thread::sleep_for(std::chrono::seconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return runs + "/" + id;
  }

  const ShrinkOptions& o_;
  std::string property_, work_, bin_;
  int runs_ = 0, skipped_ = 0;
  bool exhausted_ = false;
};

// The faults `keep` of `doc`; an `any` expectation with one entry per fault (a campaign run's)
// keeps the same entries, so the expectation still matches the faults.
YAML::Node with_faults(const YAML::Node& doc, const std::vector<size_t>& keep) {
  YAML::Node d = YAML::Clone(doc);
  const YAML::Node all = doc["faults"];
  YAML::Node faults(YAML::NodeType::Sequence);
  for (size_t i : keep) faults.push_back(YAML::Clone(all[i]));
  d["faults"] = faults;
  const YAML::Node e = doc["expect"];
  if (e && e["oracle"] && e["oracle"].Scalar() == "any" && e["of"] &&
      e["of"].size() == all.size()) {
    YAML::Node of(YAML::NodeType::Sequence);
    for (size_t i : keep) of.push_back(YAML::Clone(e["of"][i]));
    if (keep.size() == 1) {
      d["expect"] = of[0];
    } else {
      d["expect"]["of"] = of;
      if (of[0]["symptom"]) d["expect"]["symptom"] = of[0]["symptom"].Scalar();
    }
  }
  return d;
}

int int_at(const YAML::Node& n, const char* key, int fallback) {
  return n && n[key] ? n[key].as<int>() : fallback;
}

// Whether every rank the scenario names (fault items, plan filters, expect.ranks, rank_env) is
// below `ranks`: a smaller world must not lose a fault's target.
bool ranks_fit(const YAML::Node& doc, int ranks) {
  for (const auto& f : doc["faults"]) {
    if (int_at(f, "rank", -1) >= ranks) return false;
    if (!f["plan"]) continue;
    try {
      for (const auto& e : fault::parse_plan(f["plan"].Scalar(), "plan").entries) {
        if (e.rank && e.rank->lo >= ranks) return false;
      }
    } catch (const std::exception&) {
      return false;
    }
  }
  std::function<bool(const YAML::Node&)> expect_ok = [&](const YAML::Node& e) {
    for (const auto& r : e["ranks"]) {
      if (r.as<int>() >= ranks) return false;
    }
    for (const auto& x : e["of"]) {
      if (!expect_ok(x)) return false;
    }
    return true;
  };
  if (doc["expect"] && !expect_ok(doc["expect"])) return false;
  for (auto it = doc["rank_env"].begin(); doc["rank_env"] && it != doc["rank_env"].end(); ++it) {
    if (it->first.as<int>() >= ranks) return false;
  }
  return true;
}

// `doc` with the layout dp x tp x pp (nodes kept when they still divide the ranks); null when no
// such scenario can keep the faults' targets.
YAML::Node with_layout(const YAML::Node& doc, int dp, int tp, int pp) {
  const int ranks = dp * tp * pp;
  const int nodes = int_at(doc["topology"], "nodes", 1);
  if (!ranks_fit(doc, ranks) || nodes > ranks || ranks % nodes != 0) return YAML::Node();
  YAML::Node d = YAML::Clone(doc);
  d["topology"]["ranks"] = ranks;
  d["topology"]["dp"] = dp;
  d["topology"]["tp"] = tp;
  d["topology"]["pp"] = pp;
  return d;
}

void shrink_faults(Shrinker& s, YAML::Node& doc) {
  const size_t n = doc["faults"] ? doc["faults"].size() : 0;
  if (n < 2) return;
  const YAML::Node original = YAML::Clone(doc);
  const DdminResult r = ddmin(n, [&](const std::vector<size_t>& keep) {
    return s.attempt(with_faults(original, keep),
                     fmt::format("faults {} of {}", fmt::join(keep, ","), n));
  });
  doc = with_faults(original, r.kept);
}

void shrink_ranks(Shrinker& s, YAML::Node& doc) {
  for (bool reduced = true; reduced;) {
    reduced = false;
    const YAML::Node t = doc["topology"];
    const int dp = int_at(t, "dp", 1), tp = int_at(t, "tp", 1), pp = int_at(t, "pp", 1);
    const std::vector<std::tuple<int, int, int, std::string>> tries = {
        {dp / 2, tp, pp, "dp " + std::to_string(dp / 2)}, {dp, 1, pp, "tp 1"}, {dp, tp, 1, "pp 1"}};
    for (const auto& [d, t2, p, what] : tries) {
      if (d < 1 || (d == dp && t2 == tp && p == pp)) continue;
      const YAML::Node cand = with_layout(doc, d, t2, p);
      if (!cand.IsMap()) continue;
      const int v = s.attempt(cand, fmt::format("{} ranks ({})", d * t2 * p, what));
      if (v < 0) return;
      if (v == 1) {
        doc = cand;
        reduced = true;
        break;
      }
    }
  }
}

void shrink_steps(Shrinker& s, YAML::Node& doc) {
  while (doc["workload"]["steps"] && doc["workload"]["steps"].as<int64_t>() >= 4) {
    YAML::Node cand = YAML::Clone(doc);
    const int64_t half = doc["workload"]["steps"].as<int64_t>() / 2;
    cand["workload"]["steps"] = half;
    if (s.attempt(cand, fmt::format("{} steps", half)) != 1) return;
    doc = cand;
  }
}

void shrink_model(Shrinker& s, YAML::Node& doc) {
  if (!doc["workload"]["model"] || doc["workload"]["model"].Scalar() == "tiny") return;
  YAML::Node cand = YAML::Clone(doc);
  cand["workload"]["model"] = "tiny";
  if (s.attempt(cand, "model tiny") == 1) doc = cand;
}

std::string work_dir_for(const ShrinkOptions& o) {
  if (!o.work_dir.empty()) {
    fs::create_directories(o.work_dir);
    return fs::absolute(o.work_dir).lexically_normal().string();
  }
  const fs::path run = fs::absolute(o.run_dir).lexically_normal();
  const fs::path p = run.has_filename() ? run : run.parent_path();
  return make_unique_dir(p.parent_path().string(), p.filename().string() + "-shrink");
}

std::string text_of(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// `doc` without the keys whose value is the default (the run directory's scenario.yaml has every
// key filled in): what is left is what the minimal scenario says.
YAML::Node without_defaults(const YAML::Node& doc, const YAML::Node& defaults) {
  YAML::Node out(YAML::NodeType::Map);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node d = defaults.IsMap() ? defaults[k] : YAML::Node();
    if (d.IsDefined() && !d.IsNull() && text_of(d) == text_of(it->second)) continue;
    if (it->second.IsMap() && d.IsMap()) {
      const YAML::Node inner = without_defaults(it->second, d);
      if (inner.size() > 0) out[k] = inner;
      continue;
    }
    out[k] = it->second;
  }
  return out;
}

void measure(ShrinkResult& r, const YAML::Node& doc, bool before) {
  const size_t faults = doc["faults"] ? doc["faults"].size() : 0;
  const int ranks = int_at(doc["topology"], "ranks", 1);
  const int64_t steps = doc["workload"]["steps"] ? doc["workload"]["steps"].as<int64_t>() : 0;
  const std::string model = doc["workload"]["model"] ? doc["workload"]["model"].Scalar() : "";
  (before ? r.faults_before : r.faults_after) = faults;
  (before ? r.ranks_before : r.ranks_after) = ranks;
  (before ? r.steps_before : r.steps_after) = steps;
  (before ? r.model_before : r.model_after) = model;
}

}  // namespace

ShrinkResult shrink_run(const ShrinkOptions& o) {
  if (o.max_runs < 1) {
    throw UsageError(fmt::format("--max-runs {}: expected 1 or more runs", o.max_runs));
  }
  if (!fs::exists(o.run_dir + "/scenario.yaml")) {
    throw Error(fmt::format("{}: not a run directory (no scenario.yaml)", o.run_dir));
  }
  ShrinkResult r;
  if (!o.property.empty()) {
    const auto& names = property_names();
    const bool known = std::find(names.begin(), names.end(), o.property) != names.end() ||
                       o.property.rfind("detector_missed:", 0) == 0;
    if (!known) {
      throw UsageError(
          fmt::format("--property '{}': not a property (allowed: {}, "
                      "detector_missed:NAME)",
                      o.property, fmt::join(names, ", ")));
    }
  }
  r.property = violation_of(o.run_dir, o.property, &r.why);
  if (r.property.empty()) {
    throw Error(fmt::format("{}: shows no {}; nothing to shrink", o.run_dir,
                            o.property.empty() ? fmt::format("property violation (checked: {})",
                                                             fmt::join(property_names(), ", "))
                                               : o.property));
  }
  YAML::Node doc = YAML::LoadFile(o.run_dir + "/scenario.yaml");
  const YAML::Node e = doc["expect"];
  const bool expects_symptom = e && e["symptom"] && !e["symptom"].Scalar().empty() &&
                               !(e["absent"] && e["absent"].as<bool>());
  if (r.property == "expectation_failed" && expects_symptom && o.property.empty()) {
    throw UsageError(fmt::format(
        "{}: its expected symptom {} did not show; any subset of faults that causes nothing fails "
        "the same way, so shrinking it by expectation_failed finds nothing that matters (shrink a "
        "run whose expectation is `completed`, or one a detector missed; --property "
        "expectation_failed insists)",
        o.run_dir, e["symptom"].Scalar()));
  }
  measure(r, doc, true);
  r.work_dir = work_dir_for(o);
  fs::create_directories(r.work_dir + "/candidates");
  fs::create_directories(r.work_dir + "/runs");
  Shrinker s(o, r.property, r.work_dir);
  shrink_faults(s, doc);
  shrink_ranks(s, doc);
  shrink_steps(s, doc);
  shrink_model(s, doc);
  r.runs = s.runs();
  r.budget_exhausted = s.exhausted();
  r.log = s.log;
  measure(r, doc, false);
  YAML::Node minimal(YAML::NodeType::Map);
  if (doc["name"]) minimal["name"] = doc["name"].Scalar() + "-shrunk";
  doc["description"] =
      fmt::format("{} shrunk by faultline shrink: {} ({} runs)", o.run_dir, r.property, r.runs);
  const YAML::Node rest = without_defaults(doc, loader::defaults());
  for (auto it = rest.begin(); it != rest.end(); ++it) {
    if (it->first.Scalar() != "name") minimal[it->first.Scalar()] = it->second;
  }
  doc = minimal;
  r.out_file = o.out_file.empty() ? r.work_dir + "/minimal.yaml" : o.out_file;
  write_atomic(r.out_file,
               candidate_yaml(doc, fmt::format("shrunk from {} by faultline shrink: {} ({} runs{})",
                                               o.run_dir, r.property, r.runs,
                                               r.budget_exhausted ? ", budget spent" : "")));
  return r;
}

std::string ShrinkResult::text() const {
  return fmt::format(
      "property   {}: {}\n"
      "runs       {}{}\n"
      "faults     {} -> {}\n"
      "ranks      {} -> {}\n"
      "steps      {} -> {}\n"
      "model      {} -> {}\n"
      "minimal    {}\n",
      property, why, runs, budget_exhausted ? " (the --max-runs budget was spent)" : "",
      faults_before, faults_after, ranks_before, ranks_after, steps_before, steps_after,
      model_before, model_after, out_file);
}

}  // namespace fl::harness::campaign
