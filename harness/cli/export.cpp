// `faultline export SUITE|CAMPAIGN|RUN... -o DIR`: the runs as a dataset in a documented,
// versioned layout (JSON Lines, a manifest with hashes; docs/dataset.md).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/score/dataset.hpp"

namespace fl::cli {
namespace {

Handler setup_export(CLI::App& sub) {
  auto o = std::make_shared<fl::harness::ExportOptions>();
  sub.add_option("paths", o->paths, "Suite, campaign or run directories")->required();
  sub.add_option("-o,--output", o->out, "The dataset directory (must not exist)")->required();
  return [o] {
    const int n = fl::harness::export_dataset(*o);
    std::printf("exported %d runs to %s (manifest.json, runs.jsonl, runs/)\n", n, o->out.c_str());
    return 0;
  };
}

}  // namespace

const Command& export_command() {
  static const Command c{"export", "Write runs as a dataset: JSON Lines and a manifest of hashes",
                         setup_export};
  return c;
}

}  // namespace fl::cli
