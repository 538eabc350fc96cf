// A worker's scenario-visible options, declared once: each is a CLI11 option (type and default
// from the variable it binds, help, range or choices) tagged with the scenario key that sets it
// (`workload.zero.reduce_bucket_size`). `--describe-options` prints them as JSON; the build runs
// every worker with it and compiles the result into the harness, which turns the declarations
// into schema rows and forwards a scenario's `workload:` keys as these flags without naming any.
#pragma once

#include <CLI/CLI.hpp>

#include <deque>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace fl::worker {

// What the harness learns of one option (also the JSON `--describe-options` prints).
struct OptionInfo {
  std::string key;   // scenario key path; a section when `type` is "section"
  std::string flag;  // the flag the harness passes ("--reduce-bucket-size"); bools: see negation
  std::string type;  // "section", "int", "float", "bool", "string", "list"
  std::string default_value;     // YAML text of the worker's own default
  std::string scenario_default;  // YAML text of the scenario's default ("" : the worker's)
  std::string help;
  std::vector<std::string> choices;  // a string option that takes one of these
  double min = 0, max = 0;           // int / float when min < max
  std::string negation;    // a bool flag: the flag that sets it false ("--no-zero-init"; "" : none)
  bool flag_only = false;  // a bool switched by presence (--drop-last), not given a value
  bool always = false;     // passed even at the worker's default (it comes from the environment)
  std::string format;      // a string's form beyond its type ("version": base/version.hpp)
};

class Options;

// Refines the option just declared; every setter applies to the CLI11 option as well.
class Knob {
 public:
  Knob(OptionInfo& info, CLI::Option* opt) : info_(&info), opt_(opt) {}
  Knob& range(double min, double max);
  Knob& choices(std::vector<std::string> allowed);
  // The scenario's default when it differs from the worker's ("8" prompt tokens where a bare
  // fl-infer takes 4): the harness passes the flag for it.
  Knob& scenario_default(std::string yaml);
  // The worker's default comes from its environment: the harness always passes the value.
  Knob& always();
  // A version string ("12.1", "2.1.0"; empty: not stated): the worker and the harness's
  // validation refuse anything else (base/version.hpp).
  Knob& version();

 private:
  OptionInfo* info_;
  CLI::Option* opt_;
};

class Options {
 public:
  explicit Options(CLI::App& app) : app_(&app) {}

  // A map of keys ("workload.zero") with its help line.
  void section(std::string key, std::string help);
  // An option with a value. `flag`: CLI11 names, the first is the one the harness passes
  // ("--warmup-steps,--warmup"); a list option repeats its flag once per item.
  template <class T>
  Knob add(std::string key, std::string flag, T& var, std::string help);
  // A bool switched by presence: "--drop-last" sets it, "!--no-zero-init" clears it, both may be
  // given ("--zero-init,!--no-zero-init").
  Knob add_flag(std::string key, const std::string& names, bool& var, std::string help);

  const std::deque<OptionInfo>& infos() const { return infos_; }
  nlohmann::json describe() const;
  // When argv[1] is "--describe-options": prints describe() and returns true (exit 0).
  bool describe_if_asked(int argc, char** argv) const;

 private:
  OptionInfo& push(std::string key, std::string flag, std::string type, std::string def,
                   std::string help);
  CLI::App* app_;
  std::deque<OptionInfo> infos_;  // a deque: a Knob keeps a pointer into it
};

namespace detail {
template <class T>
std::string yaml_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return v.empty() ? "[]" : fmt::format("[{}]", fmt::join(v, ", "));
  } else {
    return fmt::format("{}", v);
  }
}
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_integral_v<T>) return "int";
  if constexpr (std::is_floating_point_v<T>) return "float";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "list";
  return "string";
}
}  // namespace detail

template <class T>
Knob Options::add(std::string key, std::string flag, T& var, std::string help) {
  OptionInfo& info =
      push(std::move(key), flag, detail::type_name<T>(), detail::yaml_text(var), help);
  CLI::Option* opt = app_->add_option(flag, var, help);
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  return Knob(info, opt);
}

}  // namespace fl::worker
