// The dataset anyone can use (docs/dataset.md): `faultline export` copies runs into a versioned,
// documented layout of JSON Lines and plain files with a manifest of hashes, and `faultline score
// --offline` (offline.hpp) feeds those histories to detectors again.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness {

// The layout's name and version in manifest.json. A reader refuses a major version it does not
// know; within one version fields are only added.
inline constexpr const char* kDatasetSchema = "faultline.dataset";
inline constexpr int kDatasetSchemaVersion = 1;

struct ExportOptions {
  std::vector<std::string> paths;  // suite, campaign or run directories
  std::string out;                 // must not exist
};

// Writes the dataset; returns the number of runs. Throws ConfigError when `out` exists (an export
// never overwrites) or a path holds no run.
int export_dataset(const ExportOptions& o);

// The run directories of a dataset directory (its runs/<id>/, in manifest order), after checking
// the manifest's schema and version. Throws ConfigError for a directory that is not a dataset of a
// version this build reads.
std::vector<std::string> dataset_runs(const std::string& dir);

// The ground truth of one run as the dataset records it: its class (positive, negative,
// excluded) and why, the expected symptom, stage, when the fault was injected and the symptom
// manifested, the ranks the oracle named, the verdict, and every fault event of the history.
nlohmann::json run_ground_truth(const std::string& run_dir);

}  // namespace fl::harness
