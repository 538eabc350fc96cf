#include "harness/catalog/catalog.hpp"

#include <fcntl.h>
#include <glob.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "harness/report/report.hpp"
#include "harness/run/launch_args.hpp"
#include "harness/run/runner.hpp"
#include "harness/scenario/scenario.hpp"

extern "C" char** environ;

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

std::string line_of(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}:{}", file, n.Mark().line + 1, n.Mark().column + 1);
}

// Scenario files under `dir` (recursively), sorted.
std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file() && it->path().extension() == ".yaml") out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<CatalogEntry> load_catalog(const std::string& catalog_file,
                                       const std::string& scenarios_dir) {
  const Taxonomy& tax = taxonomy();
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(catalog_file);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(fmt::format("{}: {}", catalog_file, e.what()));
  }
  const YAML::Node syms = doc["symptoms"];
  if (!syms || !syms.IsMap()) {
    throw ScenarioError(
        fmt::format("{}: expected a 'symptoms' map keyed by symptom id", catalog_file));
  }
  std::vector<CatalogEntry> out;
  for (const auto& s : tax.symptoms) {
    const YAML::Node e = syms[s.id];
    if (!e) {
      throw ScenarioError(
          fmt::format("{}: symptom {} ({}) has no entry (every taxonomy symptom needs one)",
                      catalog_file, s.id, s.name));
    }
    CatalogEntry c;
    c.id = s.id;
    c.name = s.name;
    c.stage = s.stage;
    c.about = e["about"] ? e["about"].as<std::string>() : "";
    // Each listed id must exist in the taxonomy.
    auto ids = [&](const char* key, const char* what, const std::vector<std::string>& allowed) {
      std::vector<std::string> got;
      for (const auto& x : e[key]) {
        const std::string id = x.as<std::string>();
        if (std::count(allowed.begin(), allowed.end(), id) == 0) {
          throw ScenarioError(fmt::format("{}: symptoms.{}.{}: unknown {} '{}' (allowed: {})",
                                          line_of(catalog_file, x), s.id, key, what, id,
                                          fmt::join(allowed, ", ")));
        }
        got.push_back(id);
      }
      return got;
    };
    c.causes = ids("causes", "root cause", tax.root_causes);
    c.fixes = ids("fixes", "fix pattern", tax.fix_patterns);
    out.push_back(std::move(c));
  }
  for (auto it = syms.begin(); it != syms.end(); ++it) {
    const std::string id = it->first.as<std::string>();
    if (!tax.symptom(id)) {
      throw ScenarioError(fmt::format("{}: '{}' is not a symptom of the taxonomy",
                                      line_of(catalog_file, it->first), id));
    }
  }
  for (const auto& f : yaml_files(scenarios_dir)) {
    Scenario sc = load_scenario(f);
    const std::string sym = !sc.ref_symptom.empty() ? sc.ref_symptom : sc.expect.symptom;
    if (sym.empty()) continue;
    auto e = std::find_if(out.begin(), out.end(), [&](auto& c) { return c.id == sym; });
    if (e == out.end()) continue;  // load_scenario already checked it against the taxonomy
    e->scenarios.push_back(
        {f, sc.name, sym, sc.ref_root_cause, sc.ref_fix_pattern, sc.ref_issue, sc.has_fix});
  }
  return out;
}

std::string catalog_table(const std::vector<CatalogEntry>& entries) {
  std::string out = fmt::format("{:<5} {:<46} {:>9} {:>4}  {}\n", "id", "symptom", "scenarios",
                                "fix", "causes / fixes");
  int covered = 0;
  int stage = 0;
  for (const auto& e : entries) {
    if (e.stage != stage) {
      stage = e.stage;
      out += fmt::format("-- stage {}\n", stage);
    }
    int fixes = 0;
    for (auto& s : e.scenarios) fixes += s.has_fix ? 1 : 0;
    covered += e.scenarios.empty() ? 0 : 1;
    out += fmt::format("{:<5} {:<46} {:>9} {:>4}  {} / {}\n", e.id, e.name.substr(0, 46),
                       e.scenarios.empty() ? std::string("-") : std::to_string(e.scenarios.size()),
                       e.scenarios.empty() ? std::string("-") : std::to_string(fixes),
                       fmt::join(e.causes, ","), fmt::join(e.fixes, ","));
  }
  out += fmt::format("{} of {} symptoms have a scenario\n", covered, entries.size());
  return out;
}

nlohmann::json catalog_json(const std::vector<CatalogEntry>& entries) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : entries) {
    nlohmann::json sc = nlohmann::json::array();
    for (const auto& s : e.scenarios) {
      sc.push_back({{"file", s.file},
                    {"name", s.name},
                    {"root_cause", s.root_cause},
                    {"fix_pattern", s.fix_pattern},
                    {"issue", s.issue},
                    {"has_fix", s.has_fix}});
    }
    a.push_back({{"id", e.id},
                 {"name", e.name},
                 {"stage", e.stage},
                 {"about", e.about},
                 {"causes", e.causes},
                 {"fixes", e.fixes},
                 {"scenarios", sc},
                 {"covered", !e.scenarios.empty()}});
  }
  return a;
}

int SuiteResult::failures() const {
  return static_cast<int>(
      std::count_if(cases.begin(), cases.end(), [](auto& c) { return c.outcome != "pass"; }));
}

namespace {

struct SuiteSpec {
  std::string name;
  std::vector<std::string> files;
  std::vector<uint64_t> seeds;  // empty: each scenario's own
  bool fix = true;
};

SuiteSpec load_suite(const std::string& path) {
  SuiteSpec s;
  if (fs::is_directory(path)) {
    s.name = fs::path(path).filename().string();
    s.files = yaml_files(path);
  } else {
    YAML::Node doc;
    try {
      doc = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      throw ScenarioError(fmt::format("{}: {}", path, e.what()));
    }
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      if (k != "name" && k != "scenarios" && k != "seeds" && k != "fix" && k != "description") {
        throw ScenarioError(
            fmt::format("{}: {}: unknown key (allowed: name, description, "
                        "scenarios, seeds, fix)",
                        line_of(path, it->first), k));
      }
    }
    s.name = doc["name"] ? doc["name"].as<std::string>() : fs::path(path).stem().string();
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
  if (s.files.empty()) throw ScenarioError(fmt::format("{}: the suite has no scenario", path));
  return s;
}

}  // namespace

// Median of the steps' tokens/s in a run's history (each step counted once, at its slowest
// rank), 0 without steps.
double median_tokens_per_s(const std::string& run_dir) {
  std::map<int64_t, double> per_step;
  std::ifstream in(run_dir + "/history.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"step\"") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("source", "") != "rank") continue;
    const double t = j["data"].value("tokens_per_s", 0.0);
    if (t <= 0) continue;
    auto [it, fresh] = per_step.emplace(j.value("step", int64_t{-1}), t);
    if (!fresh) it->second = std::min(it->second, t);
  }
  std::vector<double> v;
  for (auto& [s, t] : per_step) v.push_back(t);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

SuiteResult run_suite(const std::string& path, const SuiteOptions& o) {
  const SuiteSpec spec = load_suite(path);
  SuiteResult res;
  res.name = spec.name;
  const auto stamp = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y%m%d-%H%M%S", std::localtime(&stamp));
  res.dir =
      fs::absolute(fs::path(o.results_dir) / fmt::format("{}-{}{}", ts, spec.name, o.name_suffix))
          .string();
  fs::create_directories(res.dir + "/runs");
  // Every scenario is loaded first: a broken file stops the suite before anything runs.
  for (const auto& f : spec.files) {
    Scenario s = load_scenario(f);
    std::vector<uint64_t> seeds = spec.seeds.empty() ? std::vector<uint64_t>{s.seed} : spec.seeds;
    for (uint64_t seed : seeds) {
      for (bool fix : {false, true}) {
        if (fix && (!spec.fix || !s.has_fix)) continue;
        SuiteCase c;
        c.scenario_file = f;
        c.name = s.name;
        c.symptom = !s.ref_symptom.empty() ? s.ref_symptom : s.expect.symptom;
        c.seed = seed;
        c.fix = fix;
        res.cases.push_back(c);
      }
    }
  }
  const std::string bin =
      o.faultline_bin.empty() ? fs::read_symlink("/proc/self/exe").string() : o.faultline_bin;
  std::map<pid_t, size_t> running;
  std::map<pid_t, std::chrono::steady_clock::time_point> started;
  size_t next = 0, done = 0;
  int failed = 0;
  std::string last_line;
  const bool tty = ::isatty(2) != 0;
  auto progress = [&] {
    if (!o.progress) return;
    if (!tty) {  // a log, not a terminal: one line per finished run
      if (done == 0) return;
      std::fprintf(stderr, "[%zu/%zu] %s\n", done, res.cases.size(), last_line.c_str());
      return;
    }
    const size_t width = 30;
    const size_t filled = width * done / res.cases.size();
    std::fprintf(stderr, "\r[%s%s] %zu/%zu runs, %d failed ", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, res.cases.size(), failed);
    std::fflush(stderr);
  };
  progress();
  while (done < res.cases.size()) {
    while (running.size() < static_cast<size_t>(std::max(1, o.jobs)) && next < res.cases.size()) {
      SuiteCase& c = res.cases[next];
      const std::string id = fmt::format("{}{}-s{}", c.name, c.fix ? "-fix" : "", c.seed);
      c.run_dir = res.dir + "/runs/" + id;
      std::vector<std::string> argv{bin,
                                    "run",
                                    c.scenario_file,
                                    "--results",
                                    res.dir + "/runs",
                                    "--run-id",
                                    id,
                                    "--set",
                                    fmt::format("seed={}", c.seed)};
      if (c.fix) argv.push_back("--fix");
      argv.insert(argv.end(), o.run_args.begin(), o.run_args.end());
      const pid_t pid = spawn_logged(argv, res.dir + "/runs/" + id + ".log");
      running[pid] = next;
      started[pid] = std::chrono::steady_clock::now();
      ++next;
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    SuiteCase& c = res.cases[it->second];
    c.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started[pid]).count();
    running.erase(it);
    std::ifstream in(c.run_dir + "/verdict.json");
    auto v = nlohmann::json::parse(in, nullptr, false);
    if (v.is_discarded() || !v.is_object()) {
      c.outcome = "error";
      c.explanation = fmt::format("no verdict (exit status {}; see {}.log)",
                                  WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), c.run_dir);
    } else {
      c.outcome = v.value("outcome", "unknown");
      c.explanation = v.value("explanation", "");
      if (v.contains("harness_error")) {
        c.outcome = "error";
        c.explanation = v["harness_error"].get<std::string>();
      }
      c.manifested_s = v.value("manifested_s", -1.0);
    }
    c.tokens_per_s = median_tokens_per_s(c.run_dir);
    failed += c.outcome == "pass" ? 0 : 1;
    ++done;
    last_line = fmt::format("{}{} seed {}: {} ({:.1f} s)", c.name, c.fix ? " [fix]" : "", c.seed,
                            c.outcome, c.wall_s);
    progress();
  }
  if (o.progress && tty) std::fprintf(stderr, "\n");
  const std::string junit = o.junit_path.empty() ? res.dir + "/junit.xml" : o.junit_path;
  const std::string json = o.json_path.empty() ? res.dir + "/summary.json" : o.json_path;
  write_atomic(junit, suite_junit(res));
  write_atomic(json, suite_json(res).dump(2) + "\n");
  return res;
}

std::string suite_table(const SuiteResult& r) {
  // One row per scenario and seed: did the symptom reproduce, did the fix clear it.
  struct Row {
    std::string symptom, name;
    uint64_t seed;
    const SuiteCase *faulty = nullptr, *fix = nullptr;
  };
  std::vector<Row> rows;
  for (const auto& c : r.cases) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](auto& x) { return x.name == c.name && x.seed == c.seed; });
    if (it == rows.end()) {
      rows.push_back({c.symptom, c.name, c.seed});
      it = rows.end() - 1;
    }
    (c.fix ? it->fix : it->faulty) = &c;
  }
  std::string out = fmt::format("{:<6} {:<36} {:>5}  {:<11} {:<13} {:>9}\n", "symptom", "scenario",
                                "seed", "reproduced", "fix verified", "symptom@");
  auto word = [](const SuiteCase* c, const char* yes) {
    if (!c) return std::string("-");
    return c->outcome == "pass" ? std::string(yes) : "NO (" + c->outcome + ")";
  };
  for (const auto& x : rows) {
    const bool clean = x.symptom.empty();
    out += fmt::format("{:<6} {:<36} {:>5}  {:<11} {:<13} {:>9}\n", clean ? "clean" : x.symptom,
                       x.name.substr(0, 36), x.seed, word(x.faulty, clean ? "clean ok" : "yes"),
                       word(x.fix, "yes"),
                       x.faulty && x.faulty->manifested_s >= 0
                           ? fmt::format("{:.1f} s", x.faulty->manifested_s)
                           : std::string("-"));
  }
  out += fmt::format("{} runs, {} failed; results in {}\n", r.cases.size(), r.failures(), r.dir);
  for (const auto& c : r.cases) {
    if (c.outcome != "pass") {
      out += fmt::format("  FAILED {}{} seed {}: {} ({})\n", c.name, c.fix ? " [fix]" : "", c.seed,
                         c.explanation, c.run_dir);
    }
  }
  return out;
}

std::string suite_junit(const SuiteResult& r) {
  double total = 0;
  for (auto& c : r.cases) total += c.wall_s;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" time=\"{:.3f}\">\n",
                     html_escape(r.name), r.cases.size(), r.failures(), total);
  for (const auto& c : r.cases) {
    out += fmt::format("  <testcase classname=\"{}.{}\" name=\"{}{} seed {}\" time=\"{:.3f}\">\n",
                       html_escape(r.name), html_escape(c.symptom.empty() ? "clean" : c.symptom),
                       html_escape(c.name), c.fix ? " [fix]" : "", c.seed, c.wall_s);
    if (c.outcome != "pass") {
      out += fmt::format("    <failure message=\"{}\">{}</failure>\n", html_escape(c.outcome),
                         html_escape(c.explanation + " (" + c.run_dir + ")"));
    }
    out += "  </testcase>\n";
  }
  out += "</testsuite>\n";
  return out;
}

nlohmann::json suite_json(const SuiteResult& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    cases.push_back({{"scenario", c.name},
                     {"file", c.scenario_file},
                     {"symptom", c.symptom},
                     {"seed", c.seed},
                     {"variant", c.fix ? "fix" : "faulty"},
                     {"outcome", c.outcome},
                     {"explanation", c.explanation},
                     {"manifested_s", c.manifested_s},
                     {"wall_s", c.wall_s},
                     {"tokens_per_s", c.tokens_per_s},
                     {"run_dir", c.run_dir}});
  }
  return {{"suite", r.name},
          {"dir", r.dir},
          {"runs", r.cases.size()},
          {"failed", r.failures()},
          {"cases", cases}};
}

}  // namespace fl::harness
