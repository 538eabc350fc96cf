// `faultline catalog`: the symptoms with their causes, fixes and scenarios (--references: where
// each scenario comes from).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/catalog/catalog.hpp"
#include "harness/cli/command.hpp"
#include "harness/model/build_paths.hpp"

namespace fl::cli {
namespace {

struct CatalogArgs {
  bool json = false, references = false;
  std::string catalog_file =
      std::string(harness::this_build::source_dir()) + "/scenarios/catalog.yaml";
  std::string symptoms_dir = std::string(harness::this_build::source_dir()) + "/scenarios/symptoms";
};

int catalog(const CatalogArgs& a) {
  const auto entries = fl::harness::load_catalog(a.catalog_file, a.symptoms_dir);
  if (a.json) {
    std::printf("%s\n", fl::harness::catalog_json(entries).dump(2).c_str());
  } else if (a.references) {
    std::printf("%s", fl::harness::references_table(entries).c_str());
  } else {
    std::printf("%s", fl::harness::catalog_table(entries).c_str());
  }
  return 0;
}

Handler setup_catalog(CLI::App& sub) {
  auto a = std::make_shared<CatalogArgs>();
  sub.add_flag("--json", a->json, "JSON output");
  sub.add_flag("--references", a->references,
               "Where each scenario comes from: a cited issue or pr, or the mechanism it "
               "stands for");
  sub.add_option("--catalog", a->catalog_file, "Catalogue file")->capture_default_str();
  sub.add_option("--scenarios", a->symptoms_dir, "Scenario directory")->capture_default_str();
  return [a] { return catalog(*a); };
}

}  // namespace

// The count is the taxonomy's (scenarios/taxonomy.yaml); CliHelp tests hold them equal.
const Command& catalog_command() {
  static const Command c{"catalog", "The 34 symptoms, their causes, fixes and scenarios",
                         setup_catalog};
  return c;
}

}  // namespace fl::cli
