// Help texts and option groups that several subcommands share. The help texts that list names
// are built from the registries that define them, so a detector, recovery policy or executor
// added there shows here.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace fl::harness {
struct RunOptions;
struct SuiteOptions;
}  // namespace fl::harness

namespace fl::cli {

// "a, b, or c" (the last joined with ", or ", as the help texts read).
std::string or_list(const std::vector<std::string>& names);

// --detector: every baseline detector, "baseline" for all of them, or a command line.
std::string detector_help();
// --recovery: every recovery policy of fl-recover, or a command.
std::string recovery_help();
// --allow-shared-results of run, replay, suite and repro.
extern const char* const kSharedResultsHelp;

// --results and --allow-shared-results of the commands that write run directories (run, replay,
// repro).
void add_run_dir_options(CLI::App& sub, fl::harness::RunOptions& ro);
// SUITE, -j/--jobs and --results of the commands that run a suite (suite, bench-detectors,
// bench-recovery); returns --jobs, for a command's own checks.
CLI::Option* add_suite_options(CLI::App& sub, std::string& suite, fl::harness::SuiteOptions& so);

}  // namespace fl::cli
