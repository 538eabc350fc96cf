// Version strings as frameworks print them ("12.1", "2.1.0", "2.1.0+cu121"): the versions a
// scenario says a job sees (workload.versions), parsed the same way by the worker and by the
// harness's validation, so that a bad one is refused before a run starts.
#pragma once

#include <optional>
#include <regex>
#include <string>

namespace fl {

struct Version {
  int major = 0, minor = 0, patch = 0;
  bool has_patch = false;
  std::string local;  // what follows '+' ("cu121"), as in torch.__version__
  std::string text;   // as written
  // "12.1": what DeepSpeed compares (".".join(v.split('.')[:2])).
  std::string major_minor() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// What a version option allows (errors and --help say it).
inline constexpr const char* kVersionAllowed =
    "MAJOR.MINOR or MAJOR.MINOR.PATCH, digits, optionally +LOCAL (e.g. 12.1, 2.1.0+cu121)";

inline std::optional<Version> parse_version(const std::string& s) {
  static const std::regex re(R"(^(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?(?:\+([A-Za-z0-9.]+))?$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return std::nullopt;
  Version v;
  v.major = std::stoi(m[1].str());
  v.minor = std::stoi(m[2].str());
  v.has_patch = m[3].matched;
  if (v.has_patch) v.patch = std::stoi(m[3].str());
  v.local = m[4].matched ? m[4].str() : "";
  v.text = s;
  return v;
}

}  // namespace fl
