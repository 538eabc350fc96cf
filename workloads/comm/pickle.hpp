// A minimal pickle writer (protocol 2) for the data PyTorch's Flight Recorder tools read: dicts,
// lists, tuples, strings, integers, floats, booleans and None, and nothing else (no globals, no
// memo), so Python's pickle.load — or any unpickler restricted to builtins — reads it back.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fl::comm {

// `v` as a pickle stream. JSON objects become dicts (string keys), arrays lists — or tuples when
// the array is the value of a key named in `tuple_keys` (at any depth), null None, numbers int or
// float, booleans bool. Integers of any 64-bit value are exact.
std::string to_pickle(const nlohmann::json& v, const std::set<std::string>& tuple_keys = {});

}  // namespace fl::comm
