// Settings registry and typed parsing of environment values.
#include "base/settings.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "base/error.hpp"

namespace fl {

SettingsRegistry& SettingsRegistry::instance() {
  static SettingsRegistry registry;
  return registry;
}

void SettingsRegistry::add(SettingInfo info) {
  std::lock_guard lock(mu_);
  settings_.push_back(std::move(info));
}

std::vector<SettingInfo> SettingsRegistry::all() const {
  std::lock_guard lock(mu_);
  auto out = settings_;
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.env < b.env; });
  return out;
}

template <>
bool parse_setting<bool>(const std::string& env, const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  raise<SettingError>("{}='{}' is not a boolean (allowed: 1/0, true/false, yes/no, on/off)", env,
                      text);
}

template <>
int64_t parse_setting<int64_t>(const std::string& env, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    raise<SettingError>("{}='{}' is not an integer", env, text);
  }
  return v;
}

template <>
double parse_setting<double>(const std::string& env, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    raise<SettingError>("{}='{}' is not a number", env, text);
  }
  return v;
}

template <>
std::string parse_setting<std::string>(const std::string&, const std::string& text) {
  return text;
}

std::string setting_to_string(bool v) {
  return v ? "true" : "false";
}
std::string setting_to_string(int64_t v) {
  return std::to_string(v);
}
std::string setting_to_string(double v) {
  return fmt::format("{}", v);
}
std::string setting_to_string(const std::string& v) {
  return v;
}
const char* setting_type_name(bool*) {
  return "bool";
}
const char* setting_type_name(int64_t*) {
  return "int";
}
const char* setting_type_name(double*) {
  return "float";
}
const char* setting_type_name(std::string*) {
  return "string";
}

}  // namespace fl
