// `faultline keys`: every scenario key with its type, default and meaning (docs/scenarios.md's
// table is this output); --json-schema: the same keys as a JSON Schema for editors
// (docs/scenario.schema.json is that output).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/model/scenario.hpp"
#include "harness/scenario/json_schema.hpp"

namespace fl::cli {
namespace {

Handler setup_keys(CLI::App& sub) {
  auto json_schema = std::make_shared<bool>(false);
  sub.add_flag("--json-schema", *json_schema,
               "Print the keys as a JSON Schema (draft-07) for editors, e.g. VS Code's YAML "
               "extension (docs/scenario.schema.json)");
  return [json_schema] {
    const std::string text =
        *json_schema ? fl::harness::scenario_json_schema() : fl::harness::schema_markdown();
    std::printf("%s", text.c_str());
    return 0;
  };
}

}  // namespace

const Command& keys_command() {
  static const Command c{"keys", "Every scenario key with type, default and meaning", setup_keys};
  return c;
}

}  // namespace fl::cli
