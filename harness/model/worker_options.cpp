#include "harness/model/worker_options.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "harness/model/key_checks.hpp"

namespace fl::harness {

const YAML::Node& WorkloadSpec::option(const std::string& key) const {
  const auto it = options.find(key);
  if (it == options.end()) {
    raise<ScenarioError>("{}: no worker declares this key (workloads/*/ --describe-options)", key);
  }
  return it->second;
}

namespace {

WorkerOption option_of(const nlohmann::ordered_json& j, const std::string& kind) {
  WorkerOption o;
  o.key = j.at("key").get<std::string>();
  o.type = j.at("type").get<std::string>();
  o.help = j.value("help", "");
  o.flag = j.value("flag", "");
  o.negation = j.value("negation", "");
  o.default_value = j.value("default", "");
  o.scenario_default = j.value("scenario_default", o.default_value);
  o.choices = j.value("choices", std::vector<std::string>{});
  o.format = j.value("format", "");
  if (j.contains("range")) {
    o.min = j["range"][0].get<double>();
    o.max = j["range"][1].get<double>();
  }
  o.flag_only = j.value("flag_only", false);
  o.always = j.value("always", false);
  o.kinds = {kind};
  return o;
}

bool same_declaration(const WorkerOption& a, const WorkerOption& b) {
  return a.type == b.type && a.flag == b.flag && a.negation == b.negation &&
         a.default_value == b.default_value && a.scenario_default == b.scenario_default &&
         a.choices == b.choices && a.format == b.format && a.min == b.min && a.max == b.max &&
         a.always == b.always;
}

KeyType key_type(const WorkerOption& o) {
  if (o.type == "section") return KeyType::kSection;
  if (o.type == "int") return KeyType::kInt;
  if (o.type == "float") return KeyType::kFloat;
  if (o.type == "bool") return KeyType::kBool;
  if (o.type == "list") return KeyType::kList;
  return o.choices.empty() ? KeyType::kString : KeyType::kEnum;
}

bool at_default(const WorkerOption& o, const YAML::Node& v) {
  if (o.type == "list") return v.size() == 0;
  if (o.type == "int") return v.as<int64_t>() == std::stoll(o.default_value);
  if (o.type == "float") return v.as<double>() == std::stod(o.default_value);
  if (o.type == "bool") return v.as<bool>() == (o.default_value == "true");
  return v.as<std::string>() == o.default_value;
}

// The value as the worker's flag carries it (numbers as the harness formats them).
std::string flag_value(const WorkerOption& o, const YAML::Node& v) {
  if (o.type == "int") return fmt::format("{}", v.as<int64_t>());
  if (o.type == "float") return fmt::format("{}", v.as<double>());
  if (o.type == "bool") return v.as<bool>() ? "true" : "false";
  return v.as<std::string>();
}

void add_flags(const WorkerOption& o, const YAML::Node& v, std::vector<std::string>& out) {
  if (o.type == "list") {
    for (const auto& item : v) out.insert(out.end(), {o.flag, item.as<std::string>()});
  } else if (o.flag_only) {
    const std::string& f = v.as<bool>() ? o.flag : o.negation;
    if (f.empty()) {
      raise<ScenarioError>("{}: {} has no flag that sets it to {} (its worker declares {})", o.key,
                           o.flag.empty() ? o.negation : o.flag, v.as<bool>(),
                           o.flag.empty() ? "only the negation" : "only the flag");
    }
    out.push_back(f);
  } else {
    out.insert(out.end(), {o.flag, flag_value(o, v)});
  }
}

}  // namespace

std::vector<WorkerOption> parse_worker_options(const std::string& json) {
  std::vector<WorkerOption> out;
  const auto doc = nlohmann::ordered_json::parse(json);  // the workers in the build's order
  for (const auto& [kind, list] : doc.items()) {
    for (const auto& j : list) {
      WorkerOption o = option_of(j, kind);
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const WorkerOption& x) { return x.key == o.key; });
      if (it == out.end()) {
        out.push_back(std::move(o));
        continue;
      }
      if (!same_declaration(*it, o)) {
        raise<ScenarioError>(
            "{}: declared differently by the {} worker ({} {}, default {}) and the {} worker "
            "({} {}, default {}): a key shared by workers must mean the same",
            o.key, it->kinds.front(), it->type, it->flag, it->scenario_default, kind, o.type,
            o.flag, o.scenario_default);
      }
      it->kinds.push_back(kind);
    }
  }
  return out;
}

const std::vector<WorkerOption>& worker_options() {
  static const std::vector<WorkerOption> all = parse_worker_options(worker_options_json());
  return all;
}

std::vector<KeySpec> worker_option_keys() {
  std::vector<KeySpec> out;
  for (const auto& o : worker_options()) {
    KeySpec k{o.key, key_type(o), o.scenario_default, o.help, o.choices, o.min, o.max};
    if (o.type == "section") k.default_value.clear();
    if (o.format == "version") k.check = loader::check_version;
    if (o.type == "string" && k.default_value.empty()) k.default_value = "\"\"";
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<std::string> worker_option_flags(const std::string& kind,
                                             const std::map<std::string, YAML::Node>& values) {
  return worker_option_flags(worker_options(), kind, values);
}

std::vector<std::string> worker_option_flags(const std::vector<WorkerOption>& options,
                                             const std::string& kind,
                                             const std::map<std::string, YAML::Node>& values) {
  std::vector<std::string> out;
  for (const auto& o : options) {
    if (o.type == "section" || std::count(o.kinds.begin(), o.kinds.end(), kind) == 0) continue;
    const auto it = values.find(o.key);
    if (it == values.end() || !it->second) continue;
    if (o.always || !at_default(o, it->second)) add_flags(o, it->second, out);
  }
  return out;
}

}  // namespace fl::harness
