// The scenario schema (schema.cpp's KeySpec list, what `faultline keys` prints) as a JSON Schema
// (draft-07, which VS Code's YAML extension reads), so editors complete and check scenario keys:
// sections become objects that allow only their keys, list items (`faults[].plan`) the items of
// an array, enums, ranges, defaults and required keys as the loader has them. fix, prepare and
// baseline take the overrides of any key above them, as the loader's checks do (validate.cpp).
// docs/scenario.schema.json is this output; `faultline keys --json-schema` writes it.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "harness/model/scenario.hpp"
#include "harness/scenario/json_schema.hpp"

namespace fl::harness {

namespace {

using K = KeyType;
using nlohmann::json;

// What YAML gives for a scalar an editor may type where the loader reads text (`python: 3.10`
// and `name: 42` load as strings).
const json kScalar = json::array({"string", "number", "boolean"});

// A key's default (YAML text) as the JSON value of its type; null when it has none.
json default_of(const KeySpec& k) {
  if (k.default_value.empty()) return nullptr;
  try {
    const YAML::Node n = YAML::Load(k.default_value);
    switch (k.type) {
      case K::kInt:
        return n.as<int64_t>();
      case K::kFloat:
        return n.as<double>();
      case K::kBool:
        return n.as<bool>();
      case K::kString:
      case K::kEnum:
        return n.as<std::string>();
      case K::kList:
      case K::kIntList:
        return n.IsSequence() && n.size() == 0 ? json::array() : json(nullptr);
      case K::kStringMap:
      case K::kSection:
        return n.IsMap() && n.size() == 0 ? json::object() : json(nullptr);
    }
  } catch (const YAML::Exception&) {
  }
  return nullptr;
}

// The schema of one key, without its children.
json key_schema(const KeySpec& k) {
  json s;
  switch (k.type) {
    case K::kSection:
      s = {{"type", "object"}};
      break;
    case K::kString:
      s = {{"type", kScalar}};
      break;
    case K::kInt:
      s = {{"type", "integer"}};
      break;
    case K::kFloat:
      s = {{"type", "number"}};
      break;
    case K::kBool:
      s = {{"type", "boolean"}};
      break;
    case K::kEnum:
      s = {{"enum", k.choices}};
      break;
    case K::kStringMap:
      s = {{"type", "object"}, {"additionalProperties", {{"type", kScalar}}}};
      break;
    case K::kIntList:
      s = {{"type", "array"}, {"items", {{"type", "integer"}}}};
      break;
    case K::kList:
      s = {{"type", "array"}};
      break;
  }
  if ((k.type == K::kInt || k.type == K::kFloat) && k.min < k.max) {
    s["minimum"] = k.min;
    s["maximum"] = k.max;
  }
  s["description"] = k.doc;
  if (const json d = default_of(k); !d.is_null()) s["default"] = d;
  return s;
}

// The object schema that holds `key`: the root, a section's, or a list's items'.
json& holder(json& root, const std::string& path) {
  json* at = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    if (dot == std::string::npos) return *at;
    std::string part = path.substr(start, dot - start);
    const bool items = part.size() > 2 && part.compare(part.size() - 2, 2, "[]") == 0;
    if (items) part.resize(part.size() - 2);
    json& parent = (*at)["properties"][part];
    at = items ? &parent["items"] : &parent;
    if (items) (*at)["type"] = "object";
    (*at)["additionalProperties"] = false;  // a section with keys of its own allows only them
    start = dot + 1;
  }
}

std::string leaf(const std::string& path) {
  const size_t dot = path.rfind('.');
  std::string part = dot == std::string::npos ? path : path.substr(dot + 1);
  if (part.size() > 2 && part.compare(part.size() - 2, 2, "[]") == 0) part.resize(part.size() - 2);
  return part;
}

// fix, prepare and baseline override any key but these (validate.cpp's check_override).
json overrides_of(const json& root, std::initializer_list<const char*> refused) {
  json o = {
      {"type", "object"}, {"additionalProperties", false}, {"properties", root["properties"]}};
  for (const char* k : refused) o["properties"].erase(k);
  return o;
}

void special_sections(json& root) {
  auto& p = root["properties"];
  // rank_env: {"2": {VAR: value}}: rank numbers, each a map of variables.
  p["rank_env"]["propertyNames"] = {{"pattern", "^[0-9]+$"}};
  p["rank_env"]["additionalProperties"] = {{"type", "object"},
                                           {"additionalProperties", {{"type", kScalar}}}};
  // expect.of: expectations, each a map of expect keys.
  p["expect"]["properties"]["of"]["items"] = {{"$ref", "#/properties/expect"}};
  // prepare and baseline: any key but these; a fix may also override prepare and baseline.
  root["definitions"]["run_overrides"] =
      overrides_of(root, {"name", "extends", "fix", "prepare", "baseline"});
  for (const char* k : {"prepare", "baseline"}) {
    const std::string doc = p[k].value("description", "");
    p[k] = {{"$ref", "#/definitions/run_overrides"}, {"description", doc}};
  }
  root["definitions"]["fix"] = overrides_of(root, {"name", "extends", "fix"});
  const std::string doc = p["fix"].value("description", "");
  p["fix"] = {{"$ref", "#/definitions/fix"}, {"description", doc}};
}

}  // namespace

std::string scenario_json_schema() {
  json root = {{"$schema", "http://json-schema.org/draft-07/schema#"},
               {"$id", "https://faultline.invalid/scenario.schema.json"},
               {"title", "faultline scenario"},
               {"description",
                "A faultline scenario file (docs/scenarios.md). Generated by `faultline keys "
                "--json-schema` from the schema the loader uses; do not edit."},
               {"type", "object"},
               {"additionalProperties", false},
               {"properties", json::object()}};
  std::vector<std::string> lists;
  for (const auto& k : scenario_schema()) {
    json& h = holder(root, k.path);
    json& slot = h["properties"][leaf(k.path)];
    json s = key_schema(k);
    for (auto& [name, v] : slot.items()) s[name] = v;  // children met before their section
    slot = std::move(s);
    if (k.type == K::kList) lists.push_back(k.path);
    if (k.required) h["required"].push_back(leaf(k.path));
  }
  // A list whose items have no keys of their own holds scalars (arguments, names, hosts).
  for (const auto& path : lists) {
    json& slot = holder(root, path)["properties"][leaf(path)];
    if (!slot.contains("items")) slot["items"] = {{"type", kScalar}};
  }
  // A file that extends another takes the base's required keys from it.
  if (root.contains("required")) {
    root["if"] = {{"not", {{"required", {"extends"}}}}};
    root["then"] = {{"required", root["required"]}};
    root.erase("required");
  }
  special_sections(root);
  return root.dump(2) + "\n";
}

}  // namespace fl::harness
