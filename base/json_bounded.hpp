// JSON from outside the harness's trust — a rank's event lines (events.jsonl, probe.jsonl), a
// Connect batch's event data, a history or manifest file read back — parsed with a depth and a
// size limit. nlohmann's parser keeps its own stack on the heap, but dump(), comparison and
// every walk of a value recurse once per level: one line of 100000 '[' parsed fine and then
// overflowed the stack of the root harness that re-serialised it (issue 32). A value that comes
// out of here is at most JsonLimits::max_depth deep, so whatever is done with it later is bounded.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fl {

struct JsonLimits {
  size_t max_depth = 64;               // nesting of arrays and objects; a scalar alone is depth 0
  size_t max_bytes = size_t{2} << 20;  // of the text
};

// Why a text was refused, for counters and messages.
enum class JsonFault { kMalformed, kTooDeep, kTooBig };

class JsonRefused : public std::runtime_error {
 public:
  JsonRefused(JsonFault fault, const std::string& what) : std::runtime_error(what), fault_(fault) {}
  JsonFault fault() const { return fault_; }

 private:
  JsonFault fault_;
};

// The value of `text`, which must be one JSON value (surrounding whitespace allowed). Throws
// JsonRefused saying what was wrong: not JSON (with nlohmann's position and reason), nested past
// max_depth, or longer than max_bytes.
nlohmann::json parse_json_bounded(std::string_view text, const JsonLimits& limits = {});

// The same without exceptions: nullopt, with the reason in *why when given.
std::optional<nlohmann::json> try_parse_json_bounded(std::string_view text,
                                                     std::string* why = nullptr,
                                                     const JsonLimits& limits = {});

// The JSON value in the regular file `path` (base/file_read.hpp: a FIFO in its place is refused,
// not waited on), held to the same limits; nullopt with the reason in *why ("PATH: ...") when the
// file is missing, not a regular file, or not JSON within the limits.
std::optional<nlohmann::json> read_json_file(const std::string& path, std::string* why = nullptr,
                                             const JsonLimits& limits = {});

}  // namespace fl
