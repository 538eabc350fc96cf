// Which cases a suite runs: the suite file (or directory) expanded into scenario x seed x
// variant, then narrowed by --only, --symptom, --stage, --exclude, --last-failed and --shard, in
// that order. A filter that leaves nothing is an input error naming it. Suite files among the
// matched files (the suite itself, when a glob covers its own folder) are skipped with a note.
// --longest-first orders the launches by an earlier summary's times. Also --list (text and JSON)
// and the option parsers.
#include <fnmatch.h>
#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "base/json_bounded.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/scenario.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

struct SuiteSpec {
  std::string name;
  std::vector<std::string> files;
  std::vector<uint64_t> seeds;  // empty: each scenario's own
  bool fix = true;
  std::vector<std::string> notes;  // suite files the globs matched, skipped
};

constexpr const char* kSuiteKeys[] = {"name", "description", "scenarios", "seeds", "fix"};

// Keeps the matched files that are scenarios; a suite file (this one, when a glob covers its own
// folder, or another) is no scenario and would fail to load as one: skipped with a note.
void drop_suite_files(SuiteSpec& s, const std::string& suite_path) {
  std::vector<std::string> kept;
  for (auto& f : s.files) {
    if (!is_suite_file(f)) {
      kept.push_back(std::move(f));
      continue;
    }
    std::error_code ec;
    const bool self = fs::is_regular_file(suite_path) && fs::equivalent(f, suite_path, ec);
    s.notes.push_back(fmt::format("{}: not loaded as a scenario: {} (top-level `scenarios:`)", f,
                                  self ? "it is this suite's own file" : "it is a suite file"));
  }
  s.files = std::move(kept);
}

std::string line_of(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}:{}", file, n.Mark().line + 1, n.Mark().column + 1);
}

SuiteSpec load_suite(const std::string& path) {
  SuiteSpec s;
  if (!fs::exists(path))
    throw ScenarioError(fmt::format("{}: no such suite file or directory", path));
  if (fs::is_directory(path)) {
    const fs::path p = fs::path(path).lexically_normal();
    s.name = (p.has_filename() ? p : p.parent_path()).filename().string();
    check_path_component(path + ": suite name (the directory's)", s.name);
    s.files = scenario_files_under(path);
  } else {
    YAML::Node doc;
    try {
      doc = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      throw ScenarioError(fmt::format("{}: {}", path, e.what()));
    }
    if (!doc.IsMap())
      throw ScenarioError(fmt::format("{}: not a suite file (expected a map)", path));
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      if (std::find(std::begin(kSuiteKeys), std::end(kSuiteKeys), k) == std::end(kSuiteKeys)) {
        throw ScenarioError(
            fmt::format("{}: {}: unknown key (allowed: name, description, "
                        "scenarios, seeds, fix)",
                        line_of(path, it->first), k));
      }
    }
    s.name = doc["name"] ? doc["name"].as<std::string>() : fs::path(path).stem().string();
    // The name becomes the suite directory's: one path component, never `../..`.
    check_path_component(
        doc["name"] ? line_of(path, doc["name"]) + ": name" : path + ": suite name", s.name);
    s.fix = doc["fix"] ? doc["fix"].as<bool>() : true;
    if (doc["seeds"]) s.seeds = doc["seeds"].as<std::vector<uint64_t>>();
    const auto base = fs::path(path).parent_path();
    if (!doc["scenarios"] || !doc["scenarios"].IsSequence()) {
      throw ScenarioError(fmt::format("{}: scenarios: expected a list of files or globs", path));
    }
    for (const auto& g : doc["scenarios"]) {
      const std::string pattern = (base / g.as<std::string>()).string();
      glob_t gl{};
      const int rc = ::glob(pattern.c_str(), 0, nullptr, &gl);
      if (rc != 0) {
        globfree(&gl);
        throw ScenarioError(fmt::format("{}: scenarios: '{}' matches no file", line_of(path, g),
                                        g.as<std::string>()));
      }
      for (size_t i = 0; i < gl.gl_pathc; ++i) s.files.push_back(gl.gl_pathv[i]);
      globfree(&gl);
    }
  }
  drop_suite_files(s, path);
  if (s.files.empty()) throw ScenarioError(fmt::format("{}: the suite has no scenario", path));
  return s;
}

// The newest earlier results of suite `name` under `results_dir`: a directory whose summary.json
// names the suite (directory names start with the time, so the last in name order is the newest).
std::string previous_results(const std::string& results_dir, const std::string& name,
                             const std::string& suffix) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(results_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    // <time>-<name><suffix>, or with -2, -3 ... when suites started in the same second.
    std::string dn = it->path().filename().string();
    if (const auto dash = dn.rfind('-');
        dash != std::string::npos && dash + 1 < dn.size() &&
        dn.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
      dn.resize(dash);
    }
    const std::string tail = "-" + name + suffix;
    if (!it->is_directory() || dn.size() < tail.size() ||
        dn.compare(dn.size() - tail.size(), tail.size(), tail) != 0) {
      continue;
    }
    const auto j = read_json_file((it->path() / "summary.json").string());
    if (!j || !j->is_object() || j->value("suite", "") != name || !j->contains("cases")) continue;
    dirs.push_back(it->path().string());
  }
  if (dirs.empty()) return "";
  std::sort(dirs.begin(), dirs.end());
  return dirs.back();
}

// A summary case's string `key` ("" when it is missing or not a string).
std::string summary_text(const nlohmann::json& c, const char* key) {
  return c.is_object() && c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : "";
}

// A summary case's id: its "id", or for summaries written before case ids, the id rebuilt. A key
// of the wrong type reads as missing.
std::string summary_case_id(const nlohmann::json& c) {
  if (!c.is_object()) return "";
  if (!summary_text(c, "id").empty()) return summary_text(c, "id");
  const uint64_t seed =
      c.contains("seed") && c["seed"].is_number_unsigned() ? c["seed"].get<uint64_t>() : 0;
  return fmt::format("{}{}-s{}", summary_text(c, "scenario"),
                     summary_text(c, "variant") == "fix" ? "-fix" : "", seed);
}

// The ids of the cases that did not pass in a summary: failures, errors, unknown verdicts,
// interrupted cases and cases --fail-fast never started (skipped for want of a device stay out:
// they would again).
std::set<std::string> not_passed(const nlohmann::json& summary) {
  std::set<std::string> ids;
  if (!summary.is_object() || !summary.contains("cases") || !summary["cases"].is_array())
    return ids;  // gone (or replaced) since it was found
  for (const auto& c : summary["cases"]) {
    const std::string o = summary_text(c, "outcome");
    const bool never_started =
        o == "skipped" && summary_text(c, "explanation").rfind("not started", 0) == 0;
    if (o != "fail" && o != "unknown" && o != "error" && o != "interrupted" && !never_started)
      continue;
    ids.insert(summary_case_id(c));
  }
  return ids;
}

}  // namespace

bool SuiteSelection::empty() const {
  return only.empty() && exclude.empty() && symptoms.empty() && stages.empty() && seeds.empty() &&
         !last_failed && shard_count == 0;
}

bool is_suite_file(const std::string& path) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception&) {
    return false;  // loading it as a scenario reports what is wrong
  }
  if (!doc.IsMap() || !doc["scenarios"]) return false;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!it->first.IsScalar()) return false;
    const std::string k = it->first.as<std::string>();
    if (std::find(std::begin(kSuiteKeys), std::end(kSuiteKeys), k) == std::end(kSuiteKeys))
      return false;
  }
  return true;
}

int shard_of(const std::string& case_id, int count) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bit
  for (unsigned char ch : case_id) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return count <= 0 ? 0 : static_cast<int>(h % static_cast<uint64_t>(count));
}

void parse_shard(const std::string& text, int& index, int& count) {
  const auto slash = text.find('/');
  auto num = [](const std::string& s, int& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
  };
  int i = 0, n = 0;
  if (slash == std::string::npos || !num(text.substr(0, slash), i) ||
      !num(text.substr(slash + 1), n)) {
    throw UsageError(
        fmt::format("--shard '{}': expected I/N, e.g. 1/4 (shard I of N, from 1)", text));
  }
  if (n < 1 || i < 1 || i > n) {
    throw UsageError(fmt::format("--shard '{}': the shard must be 1 to {} (I/N with 1 <= I <= N)",
                                 text, std::max(n, 1)));
  }
  index = i;
  count = n;
}

std::vector<uint64_t> parse_seeds(const std::string& text) {
  std::vector<uint64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? comma : comma - start);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size()) {
      throw UsageError(fmt::format(
          "--seeds '{}': expected non-negative integers separated by commas, e.g. 1,2,3", text));
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string SuiteCase::id() const {
  return fmt::format("{}{}-s{}", name, fix ? "-fix" : "", seed);
}

namespace {

void check_selection(const SuiteSelection& sel) {
  for (int st : sel.stages) {
    if (st < 1 || st > 5) throw UsageError(fmt::format("--stage {}: stages are 1 to 5", st));
  }
  const Taxonomy& tax = taxonomy();
  for (const auto& id : sel.symptoms) {
    if (tax.symptom(id) == nullptr) {
      std::vector<std::string> ids;
      for (const auto& s : tax.symptoms) ids.push_back(s.id);
      throw UsageError(fmt::format("--symptom '{}': not a symptom of the taxonomy (allowed: {})",
                                   id, fmt::join(ids, ", ")));
    }
  }
  if (sel.shard_count > 0 && (sel.shard_index < 1 || sel.shard_index > sel.shard_count)) {
    throw UsageError(fmt::format("--shard {}/{}: the shard must be 1 to {}", sel.shard_index,
                                 sel.shard_count, sel.shard_count));
  }
}

// Scenario x seed x variant. Every scenario is loaded first: a broken file stops the suite
// before anything runs.
std::vector<SuiteCase> expand_cases(const SuiteSpec& spec, const SuiteSelection& sel) {
  const Taxonomy& tax = taxonomy();
  std::vector<SuiteCase> cases;
  std::map<std::string, std::string> file_of;  // scenario name -> the first file with it
  for (const auto& f : spec.files) {
    Scenario s = load_scenario(f);
    // A case's id and run directory are its scenario's name, seed and variant: two files of one
    // name would run into one directory and one summary entry.
    if (const auto [it, fresh] = file_of.emplace(s.name, f); !fresh) {
      throw ScenarioError(fmt::format(
          "{}: name '{}' is also the name of {}: a suite names its cases and run directories by "
          "scenario name (allowed: one file per name; rename one)",
          f, s.name, it->second));
    }
    const std::vector<uint64_t> seeds = !sel.seeds.empty()    ? sel.seeds
                                        : !spec.seeds.empty() ? spec.seeds
                                                              : std::vector<uint64_t>{s.seed};
    for (uint64_t seed : seeds) {
      for (bool fix : {false, true}) {
        if (fix && (!spec.fix || !s.has_fix)) continue;
        SuiteCase c;
        c.scenario_file = f;
        c.name = s.name;
        c.symptom = !s.ref.symptom.empty() ? s.ref.symptom : s.expect.symptom;
        const auto* sym = tax.symptom(c.symptom);
        c.stage = sym ? sym->stage : 0;
        c.seed = seed;
        c.fix = fix;
        c.device = s.workload.device;
        check_path_component(f + ": name (the run id " + c.id() + ")", c.id());
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// The filters in their order; each one that leaves nothing is an error naming it and those before.
class Narrowing {
 public:
  explicit Narrowing(SuitePlan& plan) : plan_(plan), total_(plan.cases.size()) {}

  template <class Keep>
  void narrow(const std::string& filter, Keep keep) {
    std::vector<SuiteCase> left;
    for (auto& c : plan_.cases) {
      if (keep(c)) left.push_back(std::move(c));
    }
    applied_.push_back(filter);
    if (left.empty()) {
      throw UsageError(fmt::format("no case of suite '{}' ({} cases) matches {}", plan_.name,
                                   total_, fmt::join(applied_, " with ")));
    }
    plan_.cases = std::move(left);
  }

 private:
  SuitePlan& plan_;
  size_t total_;
  std::vector<std::string> applied_;
};

std::string quoted(const std::vector<std::string>& v, const char* opt) {
  std::vector<std::string> q;
  for (const auto& x : v) q.push_back(fmt::format("{} '{}'", opt, x));
  return fmt::format("{}", fmt::join(q, " or "));
}

// A case as --list --json and selection.planned write it.
nlohmann::json listed_case(const SuiteCase& c) {
  return {{"id", c.id()},           {"scenario", c.name}, {"file", c.scenario_file},
          {"symptom", c.symptom},   {"stage", c.stage},   {"seed", c.seed},
          {"variant", c.variant()}, {"device", c.device}};
}

bool matches_any(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(),
                     [&](auto& g) { return ::fnmatch(g.c_str(), name.c_str(), 0) == 0; });
}

// --last-failed: the cases that did not pass in the newest earlier results of this suite.
void narrow_to_last_failed(SuitePlan& plan, Narrowing& n, const SuiteOptions& o) {
  plan.previous_dir = previous_results(o.results_dir, plan.name, o.name_suffix);
  if (plan.previous_dir.empty()) {
    throw UsageError(fmt::format(
        "--last-failed: no earlier results of suite '{}' under {} (a directory with its "
        "summary.json)",
        plan.name, o.results_dir));
  }
  const auto ids =
      not_passed(read_json_file(plan.previous_dir + "/summary.json").value_or(nlohmann::json()));
  n.narrow(fmt::format("--last-failed (cases that did not pass in {})", plan.previous_dir),
           [&](const SuiteCase& c) { return ids.count(c.id()) > 0; });
}

// --longest-first PATH: the summary (PATH, or PATH/summary.json for a suite directory).
nlohmann::json read_times_summary(const std::string& path) {
  std::error_code ec;
  const std::string file =
      fs::is_directory(path, ec) ? (fs::path(path) / "summary.json").string() : path;
  std::string why;
  auto j = read_json_file(file, &why, JsonLimits{64, size_t{256} << 20});
  if (!j) {
    throw UsageError(
        fmt::format("--longest-first: {} (expected a suite's summary.json, or the "
                    "suite directory that holds one)",
                    why));
  }
  return std::move(*j);
}

void narrow_cases(SuitePlan& plan, const SuiteOptions& o) {
  const SuiteSelection& sel = o.select;
  Narrowing n(plan);
  if (!sel.only.empty()) {
    n.narrow(quoted(sel.only, "--only"),
             [&](const SuiteCase& c) { return matches_any(sel.only, c.name); });
  }
  if (!sel.symptoms.empty()) {
    n.narrow(quoted(sel.symptoms, "--symptom"), [&](const SuiteCase& c) {
      return std::count(sel.symptoms.begin(), sel.symptoms.end(), c.symptom) > 0;
    });
  }
  if (!sel.stages.empty()) {
    std::vector<std::string> s;
    for (int st : sel.stages) s.push_back(std::to_string(st));
    n.narrow(fmt::format("--stage {}", fmt::join(s, " or --stage ")), [&](const SuiteCase& c) {
      return std::count(sel.stages.begin(), sel.stages.end(), c.stage) > 0;
    });
  }
  if (!sel.exclude.empty()) {
    n.narrow(quoted(sel.exclude, "--exclude"),
             [&](const SuiteCase& c) { return !matches_any(sel.exclude, c.name); });
  }
  if (sel.last_failed) narrow_to_last_failed(plan, n, o);
  if (sel.shard_count > 0) {
    for (const auto& c : plan.cases) plan.planned.push_back(listed_case(c));
    n.narrow(fmt::format("--shard {}/{}", sel.shard_index, sel.shard_count),
             [&](const SuiteCase& c) {
               return shard_of(c.id(), sel.shard_count) == sel.shard_index - 1;
             });
  }
}

nlohmann::json selection_json(const SuitePlan& plan, const SuiteOptions& o, size_t total) {
  const SuiteSelection& sel = o.select;
  return {{"only", sel.only},
          {"exclude", sel.exclude},
          {"symptom", sel.symptoms},
          {"stage", sel.stages},
          {"seeds", sel.seeds},
          {"last_failed",
           sel.last_failed ? nlohmann::json(plan.previous_dir) : nlohmann::json(nullptr)},
          {"shard", sel.shard_count > 0
                        ? nlohmann::json(fmt::format("{}/{}", sel.shard_index, sel.shard_count))
                        : nlohmann::json(nullptr)},
          {"retries", o.retries},
          {"fail_fast", o.fail_fast},
          {"maxfail", o.max_fail},
          {"cases_in_suite", total},
          {"planned", sel.shard_count > 0 ? plan.planned : nlohmann::json(nullptr)}};
}

}  // namespace

SuitePlan plan_suite(const std::string& path, const SuiteOptions& o) {
  check_selection(o.select);
  const SuiteSpec spec = load_suite(path);
  SuitePlan plan;
  plan.name = spec.name;
  plan.notes = spec.notes;
  plan.cases = expand_cases(spec, o.select);
  const size_t total = plan.cases.size();
  narrow_cases(plan, o);
  plan.selection = selection_json(plan, o, total);
  if (!o.longest_first.empty()) {
    plan.launch_order =
        longest_first_order(plan.cases, read_times_summary(o.longest_first), o.longest_first);
    plan.selection["longest_first"] = o.longest_first;
  }
  return plan;
}

std::vector<size_t> longest_first_order(const std::vector<SuiteCase>& cases,
                                        const nlohmann::json& previous, const std::string& source) {
  if (!previous.is_object() || !previous.contains("suite") || !previous["suite"].is_string() ||
      !previous.contains("cases") || !previous["cases"].is_array()) {
    throw UsageError(fmt::format(
        "--longest-first {}: not a suite summary (expected an object with \"suite\" and a "
        "\"cases\" list, as `faultline suite` writes summary.json)",
        source));
  }
  // Only a case that ran to a verdict has its time: a skipped, interrupted or harness-error case
  // ran for part of it or not at all. The longest of an id's entries counts.
  std::map<std::string, double> took;
  for (const auto& c : previous["cases"]) {
    const std::string o = summary_text(c, "outcome");
    if (o != "pass" && o != "fail" && o != "flaky" && o != "unknown") continue;
    if (!c.contains("wall_s") || !c["wall_s"].is_number() || !c.contains("attempts") ||
        !c["attempts"].is_array() || c["attempts"].empty())
      continue;
    double& t = took[summary_case_id(c)];
    t = std::max(t, c["wall_s"].get<double>());
  }
  std::vector<size_t> order(cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // A case the summary has no time for sorts first (as if it took forever): a new case may be
  // long, and its verdict is the one nobody has seen.
  const auto key = [&](size_t i) {
    const auto it = took.find(cases[i].id());
    return it == took.end() ? std::numeric_limits<double>::infinity() : it->second;
  };
  if (!cases.empty() &&
      std::all_of(order.begin(), order.end(), [&](size_t i) { return std::isinf(key(i)); })) {
    std::fprintf(
        stderr,
        "faultline: warning: --longest-first %s has no time for any selected case (another "
        "suite, or renamed cases): they start in suite order\n",
        source.c_str());
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) > key(b); });
  return order;
}

std::string suite_list(const SuitePlan& plan) {
  std::string out;
  std::set<std::string> scenarios;
  for (const auto& c : plan.cases) {
    out += fmt::format("{:<40} {:<6} seed {:<6} symptom {}\n", c.name, c.variant(), c.seed,
                       c.symptom.empty() ? "clean" : c.symptom);
    scenarios.insert(c.name);
  }
  for (const auto& n : plan.notes) out += fmt::format("# note: {}\n", n);
  out += fmt::format("# {} cases ({} scenarios) of suite {}\n", plan.cases.size(), scenarios.size(),
                     plan.name);
  return out;
}

nlohmann::json suite_list_json(const SuitePlan& plan) {
  nlohmann::json cases = nlohmann::json::array();
  std::set<std::string> scenarios;
  for (const auto& c : plan.cases) {
    cases.push_back(listed_case(c));
    scenarios.insert(c.name);
  }
  return {{"suite", plan.name}, {"count", plan.cases.size()},  {"scenarios", scenarios.size()},
          {"cases", cases},     {"selection", plan.selection}, {"notes", plan.notes}};
}

}  // namespace fl::harness
