// The catalogue: the 34 symptoms with our descriptions, their usual causes and fixes, and the
// scenarios that reproduce each. Suites, which run them, live in harness/suite/.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness {

struct ScenarioRef {
  std::string file, name, symptom, root_cause, fix_pattern, issue;
  bool has_fix = false;
  // reference.kind (issue, pr, stands-for, or "" without a citation), the cited pull request and
  // the mechanism a stands-for scenario builds.
  std::string reference_kind, pr, mechanism;
};

struct CatalogEntry {
  std::string id, name, about;
  int stage = 0;
  std::vector<std::string> causes, fixes;
  std::vector<ScenarioRef> scenarios;
};

// scenarios/catalog.yaml joined with the taxonomy and every scenario under `scenarios_dir` that
// names a symptom. Throws ScenarioError for a catalogue that misses a symptom or names an
// unknown cause or fix, and for a scenario that does not load.
std::vector<CatalogEntry> load_catalog(const std::string& catalog_file,
                                       const std::string& scenarios_dir);
std::string catalog_table(const std::vector<CatalogEntry>& entries);
// One line per scenario: its symptom, name and where it comes from: "issue OWNER/NAME#N",
// "pr OWNER/NAME#N", "stands for: MECHANISM" or "-"; then the counts of each kind.
std::string references_table(const std::vector<CatalogEntry>& entries);
nlohmann::json catalog_json(const std::vector<CatalogEntry>& entries);

}  // namespace fl::harness
