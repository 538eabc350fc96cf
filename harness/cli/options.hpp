// Help texts that several subcommands share. The ones that list names are built from the
// registries that define them, so a detector, recovery policy or executor added there shows here.
#pragma once

#include <string>
#include <vector>

namespace fl::cli {

// "a, b, or c" (the last joined with ", or ", as the help texts read).
std::string or_list(const std::vector<std::string>& names);

// --detector: every baseline detector, "baseline" for all of them, or a command line.
std::string detector_help();
// --recovery: every recovery policy of fl-recover, or a command.
std::string recovery_help();
// --allow-shared-results of run, replay, suite and repro.
extern const char* const kSharedResultsHelp;

}  // namespace fl::cli
