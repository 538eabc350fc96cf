// `faultline sites`: every fault site compiled into this build's workers (they answer
// --describe), with its file and line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "harness/cli/command.hpp"
#include "harness/launch/worker_catalog.hpp"

namespace fl::cli {
namespace {

int print_sites(bool json) {
  const auto& c = fl::harness::worker_catalog();
  for (auto& e : c.errors) std::fprintf(stderr, "faultline: %s\n", e.c_str());
  const int status = c.errors.empty() ? 0 : 1;
  if (json) {
    auto arr = nlohmann::json::array();
    for (auto& s : c.sites) arr.push_back({{"name", s.name}, {"file", s.file}, {"line", s.line}});
    std::printf("%s\n", arr.dump(2).c_str());
    return status;
  }
  std::printf("%-24s %s\n", "site", "location");
  for (auto& s : c.sites) std::printf("%-24s %s:%d\n", s.name.c_str(), s.file.c_str(), s.line);
  std::printf("# %zu fault sites%s\n", c.sites.size(),
              c.sites_compiled ? "" : " (this build compiled them out)");
  return status;
}

Handler setup_sites(CLI::App& sub) {
  auto json = std::make_shared<bool>(false);
  sub.add_flag("--json", *json, "JSON output");
  return [json] { return print_sites(*json); };
}

}  // namespace

const Command& sites_command() {
  static const Command c{"sites", "List the fault sites compiled into this build", setup_sites};
  return c;
}

}  // namespace fl::cli
