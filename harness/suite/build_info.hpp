// What this binary is: version, the commit it was built from, build type, compiler and the
// optional parts compiled in. `faultline --version` prints it; suite summaries, leaderboards and
// reports record it as provenance.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fl::harness {

struct BuildInfo {
  std::string version;     // project version (CMakeLists.txt)
  std::string commit;      // git describe --always --dirty at build time, "unknown" without git
  std::string build_type;  // CMAKE_BUILD_TYPE
  std::string compiler;    // "GNU 12.2.0"
  bool cuda = false, nccl = false, grpc = false, fault_sites = false;
};

const BuildInfo& build_info();
nlohmann::json build_info_json();
// The text of `faultline --version`.
std::string version_text();

}  // namespace fl::harness
