// `faultline keys`: every scenario key with its type, default and meaning (docs/scenarios.md's
// table is this output).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "harness/cli/command.hpp"
#include "harness/model/scenario.hpp"

namespace fl::cli {
namespace {

Handler setup_keys(CLI::App&) {
  return [] {
    std::printf("%s", fl::harness::schema_markdown().c_str());
    return 0;
  };
}

}  // namespace

const Command& keys_command() {
  static const Command c{"keys", "Every scenario key with type, default and meaning", setup_keys};
  return c;
}

}  // namespace fl::cli
