// What the `file` fault does to a run directory's files, shared by the harness (one machine) and
// a node (FileDamage in file.cpp; this machine or a host's agent): find the files a glob names,
// keep a pristine copy, and delete, truncate or corrupt them the same way in every run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness::faults {

// Regular files (no links) under `dir` whose run-directory-relative path matches `glob`
// (fnmatch, FNM_PATHNAME), sorted; tmp/ and .faultline/ are never matched.
std::vector<std::string> match_run_files(const std::string& dir, const std::string& glob);

// Damages DIR/REL: delete, truncate (drop the last `bytes`) or corrupt (`bytes` bytes, chosen
// from `seed` and the path). Returns what was done ({action, path, size, ...}); Error if it
// cannot.
nlohmann::json damage_file(const std::string& dir, const std::string& rel,
                           const std::string& action, int64_t bytes, uint64_t seed);

}  // namespace fl::harness::faults
