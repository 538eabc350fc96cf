#include "harness/triage/regex.hpp"

namespace fl::triage {

Regex make_regex(const std::string& pattern, std::regex_constants::syntax_option_type flags) {
  return Regex(pattern, flags);
}

bool regex_find(const std::string& text, const Regex& re) {
  return std::regex_search(text, re);
}

bool regex_find(const std::string& text, std::smatch& m, const Regex& re) {
  return std::regex_search(text, m, re);
}

}  // namespace fl::triage
