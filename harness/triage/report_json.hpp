// `faultline triage --json`: the whole report as one JSON object (docs/triage.md, "JSON output"
// gives the schema). The text report and this object are built from the same Result and Draft.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "harness/triage/draft.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

// What an exit status of `faultline triage` means (0 an answer, 1 none, 2 an input error).
std::string exit_meaning(int status);

// What was read, the candidates (with the lines faultline prints for them when annotated), the
// stage and confidence; for empty or binary input an `error` member instead of an answer.
nlohmann::ordered_json result_json(const Result& r, const Tables& t, const Input& in,
                                   const std::string& input_name);
// The drafted scenario and what it could not express.
nlohmann::ordered_json draft_json(const Draft& d);
// An input or table error that left no result: {"error": ..., "exit_status": ..., ...}.
nlohmann::ordered_json error_json(const std::string& error, int status);

}  // namespace fl::triage
