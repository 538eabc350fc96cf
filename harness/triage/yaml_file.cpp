#include "harness/triage/yaml_file.hpp"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "harness/triage/triage.hpp"

namespace fl::triage {

void fail_at(const std::string& file, const YAML::Node& n, const std::string& what) {
  const auto m = n.Mark();
  throw SignatureError(fmt::format("{}:{}:{}: {}", file, m.line + 1, m.column + 1, what));
}

YAML::Node load_yaml(const std::string& file, const std::string& what) {
  try {
    return YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw SignatureError(fmt::format("{}: cannot read the {}", file, what));
  } catch (const YAML::Exception& e) {
    throw SignatureError(
        fmt::format("{}:{}:{}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

void check_keys(const std::string& file, const YAML::Node& n, const std::set<std::string>& allowed,
                const std::string& what) {
  if (!n.IsMap()) fail_at(file, n, fmt::format("{} must be a mapping", what));
  for (const auto& kv : n) {
    const auto key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      fail_at(
          file, kv.first,
          fmt::format("{}: unknown key '{}' (allowed: {})", what, key, fmt::join(allowed, ", ")));
    }
  }
}

}  // namespace fl::triage
