#include "workloads/runtime/options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/version.hpp"

namespace fl::worker {

// The checks say what was given and what is allowed, in the words of the workers' other
// configuration errors; CLI11 puts the flag in front ("--hysteresis: -1 is not allowed ...").
Knob& Knob::range(double min, double max) {
  info_->min = min;
  info_->max = max;
  opt_->check(CLI::Validator(
      [min, max](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return fmt::format("'{}' is not a number", v);
        if (x >= min && x <= max) return "";
        return fmt::format("{} is not allowed (allowed: {} to {})", v, min, max);
      },
      fmt::format("in {} to {}", min, max)));
  return *this;
}

Knob& Knob::choices(std::vector<std::string> allowed) {
  opt_->check(CLI::Validator(
      [allowed](std::string& v) -> std::string {
        for (const auto& a : allowed) {
          if (v == a) return "";
        }
        return fmt::format("'{}' is not supported (allowed: {})", v, fmt::join(allowed, ", "));
      },
      fmt::format("one of {}", fmt::join(allowed, ", "))));
  info_->choices = std::move(allowed);
  return *this;
}

Knob& Knob::scenario_default(std::string yaml) {
  info_->scenario_default = std::move(yaml);
  return *this;
}

Knob& Knob::version() {
  opt_->check(CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || parse_version(v)) return "";
        return fmt::format("'{}' is not a version (allowed: {})", v, kVersionAllowed);
      },
      kVersionAllowed));
  info_->format = "version";
  return *this;
}

Knob& Knob::always() {
  info_->always = true;
  return *this;
}

void Options::section(std::string key, std::string help) {
  push(std::move(key), "", "section", "", std::move(help));
}

OptionInfo& Options::push(std::string key, std::string flag, std::string type, std::string def,
                          std::string help) {
  OptionInfo& i = infos_.emplace_back();
  i.key = std::move(key);
  i.flag = flag.substr(0, flag.find(','));
  i.type = std::move(type);
  i.default_value = std::move(def);
  i.help = std::move(help);
  return i;
}

Knob Options::add_flag(std::string key, const std::string& names, bool& var, std::string help) {
  OptionInfo& info = push(std::move(key), "", "bool", var ? "true" : "false", help);
  info.flag_only = true;
  // The first name of each sense: what the harness passes for true, and for false.
  for (size_t at = 0; at <= names.size();) {
    size_t end = names.find(',', at);
    if (end == std::string::npos) end = names.size();
    const std::string name = names.substr(at, end - at);
    if (name.rfind('!', 0) == 0) {
      if (info.negation.empty()) info.negation = name.substr(1);
    } else if (info.flag.empty()) {
      info.flag = name;
    }
    at = end + 1;
  }
  return Knob(info, app_->add_flag(names, var, help));
}

nlohmann::json Options::describe() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : infos_) {
    nlohmann::json j = {{"key", i.key}, {"type", i.type}, {"help", i.help}};
    if (i.type != "section") {
      j["flag"] = i.flag;
      j["default"] = i.default_value;
      j["scenario_default"] = i.scenario_default.empty() ? i.default_value : i.scenario_default;
      j["flag_only"] = i.flag_only;
      j["negation"] = i.negation;
      j["always"] = i.always;
    }
    if (!i.choices.empty()) j["choices"] = i.choices;
    if (!i.format.empty()) j["format"] = i.format;
    if (i.min < i.max) j["range"] = {i.min, i.max};
    out.push_back(std::move(j));
  }
  return out;
}

bool Options::describe_if_asked(int argc, char** argv) const {
  if (argc < 2 || std::strcmp(argv[1], "--describe-options") != 0) return false;
  std::printf("%s\n", describe().dump(1).c_str());
  return true;
}

}  // namespace fl::worker
