// The scenario keys as a JSON Schema for editors (json_schema.cpp; docs/scenario.schema.json).
#pragma once

#include <string>

namespace fl::harness {

// Every key of scenario_schema() as one JSON Schema document (draft-07), as text.
std::string scenario_json_schema();

}  // namespace fl::harness
