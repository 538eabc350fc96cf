// `faultline settings`: every FAULTLINE_ setting of this build with its current value, the
// workers' included (they answer --describe). Exit 1 when a worker could not be asked, 2 when a
// setting's current value is invalid.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "harness/cli/command.hpp"
#include "harness/launch/worker_catalog.hpp"

namespace fl::cli {
namespace {

int print_json(const fl::harness::WorkerCatalog& c) {
  auto arr = nlohmann::json::array();
  for (auto& s : c.settings) {
    arr.push_back({{"env", s.env},
                   {"type", s.type},
                   {"default", s.default_value},
                   {"current", s.current},
                   {"description", s.description}});
  }
  std::printf("%s\n", arr.dump(2).c_str());
  return c.errors.empty() ? 0 : 1;
}

int print_table(const fl::harness::WorkerCatalog& c) {
  std::printf("%-32s %-7s %-12s %-12s %s\n", "variable", "type", "default", "current",
              "description");
  int status = c.errors.empty() ? 0 : 1;
  for (auto& s : c.settings) {
    std::string cur = s.current;
    if (cur.rfind("error: ", 0) == 0) {
      std::fprintf(stderr, "faultline: %s\n", cur.c_str() + 7);
      cur = "INVALID";
      status = 2;
    }
    std::printf("%-32s %-7s %-12s %-12s %s\n", s.env.c_str(), s.type.c_str(),
                s.default_value.empty() ? "\"\"" : s.default_value.c_str(),
                cur.empty() ? "\"\"" : cur.c_str(), s.description.c_str());
  }
  return status;
}

int print_settings(bool json) {
  const auto& c = fl::harness::worker_catalog();
  for (auto& e : c.errors) std::fprintf(stderr, "faultline: %s\n", e.c_str());
  return json ? print_json(c) : print_table(c);
}

Handler setup_settings(CLI::App& sub) {
  auto json = std::make_shared<bool>(false);
  sub.add_flag("--json", *json, "JSON output");
  return [json] { return print_settings(*json); };
}

}  // namespace

const Command& settings_command() {
  static const Command c{"settings", "Print every setting with its current value", setup_settings};
  return c;
}

}  // namespace fl::cli
