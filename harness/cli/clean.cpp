// `faultline clean`: remove what killed runs left outside their run directories (cgroups,
// /dev/shm); --dry-run lists it.
#include <CLI/CLI.hpp>

#include <memory>

#include "harness/cli/command.hpp"
#include "harness/faults/residue.hpp"

namespace fl::cli {
namespace {

struct CleanArgs {
  bool dry_run = false, json = false;
};

Handler setup_clean(CLI::App& sub) {
  auto a = std::make_shared<CleanArgs>();
  sub.add_flag("--dry-run", a->dry_run, "List what would be removed; remove nothing");
  sub.add_flag("--json", a->json, "JSON output");
  return [a] { return fl::harness::faults::clean_command(a->dry_run, a->json); };
}

}  // namespace

const Command& clean_command() {
  static const Command c{
      "clean", "Remove what killed runs left outside their run directories (cgroups, /dev/shm)",
      setup_clean};
  return c;
}

}  // namespace fl::cli
