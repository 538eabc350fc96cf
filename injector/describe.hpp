// What a binary declares: every FAULTLINE_ setting (with its current value) and every fault site
// linked into it. The workers answer `--describe` with it, so the harness learns their settings
// and sites without linking the workloads.
#pragma once

#include <nlohmann/json.hpp>

namespace fl::fault {

// {"settings": [{env, type, default, current, description}], "sites": [{name, file, line}],
//  "sites_compiled": bool}
nlohmann::json describe_binary();

// When argv[1] is "--describe": prints describe_binary() to stdout and returns true (the caller
// exits 0). Call it first in main, before any setup.
bool describe_if_asked(int argc, char** argv);

}  // namespace fl::fault
