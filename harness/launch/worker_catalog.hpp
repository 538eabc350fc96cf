// Every FAULTLINE_ setting and fault site of this build: the harness's own, and the workers'
// (each workload kind's worker answers `--describe`), asked once per process. The harness does
// not link the workloads; it learns what they declare from the binaries it launches.
#pragma once

#include <string>
#include <vector>

namespace fl::harness {

struct WorkerCatalog {
  struct Setting {
    std::string env, type, default_value, current, description;
  };
  struct Site {
    std::string name, file;
    int line = 0;
  };
  std::vector<Setting> settings;    // by env name, each once
  std::vector<Site> sites;          // by name, each once
  bool sites_compiled = true;       // false: the workers were built without fault sites
  std::vector<std::string> errors;  // a worker that could not be asked, and why
};

const WorkerCatalog& worker_catalog();

}  // namespace fl::harness
