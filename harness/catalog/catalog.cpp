#include "harness/catalog/catalog.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "harness/model/scenario.hpp"

namespace fl::harness {

namespace {

std::string line_of(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}:{}", file, n.Mark().line + 1, n.Mark().column + 1);
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
  for (const auto& f : scenario_files_under(scenarios_dir)) {
    Scenario sc = load_scenario(f);
    const std::string sym = !sc.ref.symptom.empty() ? sc.ref.symptom : sc.expect.symptom;
    if (sym.empty()) continue;
    auto e = std::find_if(out.begin(), out.end(), [&](auto& c) { return c.id == sym; });
    if (e == out.end()) continue;  // load_scenario already checked it against the taxonomy
    e->scenarios.push_back({f, sc.name, sym, sc.ref.root_cause, sc.ref.fix_pattern, sc.ref.issue,
                            sc.has_fix, sc.ref.kind, sc.ref.pr, sc.ref.mechanism});
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

std::string references_table(const std::vector<CatalogEntry>& entries) {
  std::string out;
  int issues = 0, prs = 0, stands_for = 0, none = 0;
  for (const auto& e : entries) {
    for (const auto& s : e.scenarios) {
      std::string where = "-";
      if (s.reference_kind == "issue") {
        where = "issue " + s.issue;
        ++issues;
      } else if (s.reference_kind == "pr") {
        where = "pr " + s.pr;
        ++prs;
      } else if (s.reference_kind == "stands-for") {
        // Said as what it is: a mechanism the scenario builds, not a thread it reproduces.
        where = "stands for: " + s.mechanism;
        ++stands_for;
      } else {
        ++none;
      }
      out += fmt::format("{:<5} {:<50} {}\n", s.symptom, s.name, where);
    }
  }
  out += fmt::format("{} cite an issue, {} a pull request, {} stand for a mechanism, {} nothing\n",
                     issues, prs, stands_for, none);
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
                    {"pr", s.pr},
                    {"reference_kind", s.reference_kind},
                    {"mechanism", s.mechanism},
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

}  // namespace fl::harness
