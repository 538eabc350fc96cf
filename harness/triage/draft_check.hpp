// Drafts against the harness: the validator `faultline validate` is (the scenario loader, with and
// without the fix, and what `run` refuses on this machine), and saving a draft without losing a
// file that is already there.
#pragma once

#include <string>

#include "harness/triage/draft.hpp"

namespace fl::triage {

// "" when `yaml` loads as `faultline validate` loads a file (and with --fix), else its error.
std::string validate_scenario_text(const std::string& yaml);
Validator harness_validator();

// Writes `yaml` to `path`: a new file, or (with `force`) replacing one. "" on success, else why
// not ("FILE exists (--force replaces it)").
std::string write_draft(const std::string& path, const std::string& yaml, bool force);

// A file of its own in the user's private temp directory holding `yaml` (for --run without
// --write); its path.
std::string write_draft_temp(const std::string& yaml, const std::string& name);

}  // namespace fl::triage
