#include "base/json_bounded.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/file_read.hpp"

namespace fl {

namespace {

using json = nlohmann::json;

// nlohmann's own DOM builder, with a count of open arrays and objects: the parse stops (the
// handler returns false) at the first one past the limit, so a refused text costs no more than
// reading up to that point and never builds a value deeper than the limit. One pass, no callback
// through std::function (bench/event_line_bench.cpp measures it against nlohmann's parse).
class BoundedDom {
 public:
  BoundedDom(json& root, size_t max_depth) : dom_(root, false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& v) { return dom_.key(v); }
  bool start_object(size_t n) { return open() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t n) { return open() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& error() const { return error_; }

 private:
  bool open() {
    if (++depth_ <= max_depth_) return true;
    too_deep_ = true;
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t max_depth_;
  size_t depth_ = 0;
  bool too_deep_ = false;
  std::string error_;
};

}  // namespace

std::optional<json> try_parse_json_bounded(std::string_view text, std::string* why,
                                           const JsonLimits& limits) {
  try {
    return parse_json_bounded(text, limits);
  } catch (const JsonRefused& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

json parse_json_bounded(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw JsonRefused(JsonFault::kTooBig, fmt::format("{} bytes of JSON (allowed: up to {})",
                                                      text.size(), limits.max_bytes));
  }
  json out;
  BoundedDom dom(out, limits.max_depth);
  if (json::sax_parse(text.begin(), text.end(), &dom)) return out;
  if (dom.too_deep()) {
    throw JsonRefused(JsonFault::kTooDeep,
                      fmt::format("JSON nested deeper than {} levels", limits.max_depth));
  }
  throw JsonRefused(JsonFault::kMalformed,
                    dom.error().empty() ? std::string("not JSON") : dom.error());
}

std::optional<json> read_json_file(const std::string& path, std::string* why,
                                   const JsonLimits& limits) {
  try {
    return parse_json_bounded(read_regular_file(path, limits.max_bytes), limits);
  } catch (const Error& e) {  // missing, not a regular file, too big
    if (why != nullptr) *why = e.what();
  } catch (const JsonRefused& e) {
    if (why != nullptr) *why = fmt::format("{}: {}", path, e.what());
  }
  return std::nullopt;
}

}  // namespace fl
