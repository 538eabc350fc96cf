// Settings declared once: each has an environment variable, a type, a default and a description,
// and registers itself so `faultline settings` can print them all with their current values.
// Values are read from the environment on first use and cached; tests may override them.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fl {

struct SettingInfo {
  std::string env;
  std::string type;
  std::string default_value;
  std::string description;
  std::function<std::string()> current;
};

class SettingsRegistry {
 public:
  static SettingsRegistry& instance();
  void add(SettingInfo info);
  std::vector<SettingInfo> all() const;  // sorted by env name

 private:
  mutable std::mutex mu_;
  std::vector<SettingInfo> settings_;
};

// Parses `text` as T; throws SettingError naming `env` and what is allowed.
template <class T>
T parse_setting(const std::string& env, const std::string& text);
template <>
bool parse_setting<bool>(const std::string& env, const std::string& text);
template <>
int64_t parse_setting<int64_t>(const std::string& env, const std::string& text);
template <>
double parse_setting<double>(const std::string& env, const std::string& text);
template <>
std::string parse_setting<std::string>(const std::string& env, const std::string& text);

std::string setting_to_string(bool v);
std::string setting_to_string(int64_t v);
std::string setting_to_string(double v);
std::string setting_to_string(const std::string& v);
const char* setting_type_name(bool*);
const char* setting_type_name(int64_t*);
const char* setting_type_name(double*);
const char* setting_type_name(std::string*);

template <class T>
class Setting {
 public:
  Setting(const char* env, T default_value, const char* description)
      : env_(env), default_(std::move(default_value)) {
    SettingsRegistry::instance().add({env_, setting_type_name(static_cast<T*>(nullptr)),
                                      setting_to_string(default_), description,
                                      [this] { return setting_to_string(get()); }});
  }

  // The value: an override if set, else the environment (parsed once), else the default.
  T get() const {
    std::lock_guard lock(mu_);
    if (override_) return *override_;
    if (!cached_) {
      const char* v = std::getenv(env_.c_str());
      cached_ = (v && *v) ? parse_setting<T>(env_, v) : default_;
    }
    return *cached_;
  }
  bool is_set_in_env() const { return std::getenv(env_.c_str()) != nullptr; }
  void set(T v) {
    std::lock_guard lock(mu_);
    override_ = std::move(v);
  }
  void reset() {
    std::lock_guard lock(mu_);
    override_.reset();
    cached_.reset();
  }
  const std::string& env() const { return env_; }

 private:
  std::string env_;
  T default_;
  mutable std::mutex mu_;
  mutable std::optional<T> cached_;
  std::optional<T> override_;
};

}  // namespace fl

// Declares a setting at namespace scope: FAULTLINE_SETTING(kCommTimeoutMs, int64_t,
// "FAULTLINE_COMM_TIMEOUT_MS", 600000, "...");
#define FAULTLINE_SETTING(ident, type, env, default_value, description) \
  inline ::fl::Setting<type> ident {                                    \
    env, type(default_value), description                               \
  }
