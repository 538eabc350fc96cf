// Scenario files checked against the schema (scenario_schema()): strict, key by key, with
// file:line:col, the key path, what is allowed and the nearest key for a misspelt one; every
// problem of a file is collected and reported together. Also the deep merge, `extends:` and --set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/faults/fault.hpp"
#include "harness/launch/worker_catalog.hpp"
#include "harness/scenario/loader.hpp"
#include "injector/plan.hpp"

namespace fl::harness::loader {

namespace fs = std::filesystem;

namespace {

using K = KeyType;

}  // namespace

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const KeySpec* find_spec(const std::string& path) {
  for (const auto& k : scenario_schema()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

std::vector<std::string> children_of(const std::string& parent) {
  std::vector<std::string> out;
  for (const auto& k : scenario_schema()) {
    const auto dot = k.path.rfind('.');
    const std::string p = dot == std::string::npos ? "" : k.path.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? k.path : k.path.substr(dot + 1);
    if (p == parent) out.push_back(leaf);
  }
  return out;
}

// Plans may only name sites the workers have (asked from the worker binaries; a build whose
// workers cannot be asked, or have no sites compiled in, skips the check).
void check_sites(const std::string& file, const YAML::Node& n, const std::string& key,
                 const fault::Plan& plan) {
  std::set<std::string> known;
  for (const auto& site : worker_catalog().sites) known.insert(site.name);
  if (known.empty()) return;
  for (const auto& e : plan.entries) {
    if (known.count(e.site)) continue;
    std::string best;
    size_t best_d = 4;
    for (const auto& k : known) {
      if (const size_t d = edit_distance(e.site, k); d < best_d) {
        best_d = d;
        best = k;
      }
    }
    fail_at(file, n, key,
            fmt::format("unknown fault site '{}'{} (allowed: {})", e.site,
                        best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best),
                        fmt::join(known, ", ")));
  }
}

// The schema path of `path` with list indices removed: faults[2].plan -> faults[].plan.
std::string schema_path(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '[') {
      out += "[]";
      while (i < path.size() && path[i] != ']') ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

void check_scalar(const std::string& file, const YAML::Node& n, const std::string& path,
                  const KeySpec& k) {
  auto bad = [&](const std::string& got) {
    fail_at(file, n, path, fmt::format("expected {}, got {}", key_type_name(k), got));
  };
  auto range = [&](double v) {
    if (k.min < k.max && (v < k.min || v > k.max)) {
      fail_at(file, n, path,
              fmt::format("{} is out of range (allowed {}-{})", n.Scalar(), k.min, k.max));
    }
  };
  if (!n.IsScalar()) bad(n.IsMap() ? "a map" : n.IsSequence() ? "a list" : "nothing");
  const std::string& v = n.Scalar();
  switch (k.type) {
    case K::kString:
      break;
    case K::kInt: {
      int64_t x = 0;
      if (!YAML::convert<int64_t>::decode(n, x)) bad(fmt::format("'{}'", v));
      range(static_cast<double>(x));
      break;
    }
    case K::kFloat: {
      double x = 0;
      if (!YAML::convert<double>::decode(n, x) || !std::isfinite(x)) bad(fmt::format("'{}'", v));
      range(x);
      break;
    }
    case K::kBool: {
      bool x = false;
      if (!YAML::convert<bool>::decode(n, x)) bad(fmt::format("'{}'", v));
      break;
    }
    case K::kEnum:
      if (std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end()) {
        fail_at(file, n, path,
                fmt::format("'{}' is not allowed (allowed: {})", v, fmt::join(k.choices, ", ")));
      }
      break;
    default:
      break;
  }
}

void validate(const std::string& file, const YAML::Node& node, const std::string& path);
void validate_key(const std::string& file, const YAML::const_iterator& it, const std::string& path,
                  const std::string& parent);
void validate_fault(const std::string& file, const YAML::Node& fault, const std::string& item);

// fix.workload.lr, prepare.workload.lr and baseline.workload.lr are checked as workload.lr; an
// item of expect.of (any / all) as expect itself: expect.of[].oracle as expect.oracle.
std::string strip_override_section(const std::string& sp) {
  std::string out = sp;
  for (const char* sec : {"fix.", "prepare.", "baseline."}) {
    if (out.rfind(sec, 0) == 0) out = out.substr(std::strlen(sec));
  }
  static const std::string item = "expect.of[]";
  while (out.rfind(item, 0) == 0) out = "expect" + out.substr(item.size());
  return out;
}

void validate_map(const std::string& file, const YAML::Node& node, const std::string& path) {
  if (!node.IsMap()) {
    fail_at(file, node, path.empty() ? "(document)" : path,
            fmt::format("expected a map, got {}", node.IsSequence() ? "a list" : "a scalar"));
  }
  std::string parent = strip_override_section(schema_path(path));
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Each key is checked on its own: with a collector active, one bad key does not hide the next.
    ErrorCollector::check([&] { validate_key(file, it, path, parent); });
  }
}

void validate_key(const std::string& file, const YAML::const_iterator& it, const std::string& path,
                  const std::string& parent) {
  const std::string key = it->first.Scalar();
  const std::string child = path.empty() ? key : path + "." + key;
  const std::string sp = parent.empty() ? key : parent + "." + key;
  if (parent == "fix" || parent == "prepare" || parent == "baseline") {
    // Overrides: checked against the top-level keys.
    if (key == "fix" || key == "name" || key == "extends" ||
        ((key == "prepare" || key == "baseline") && parent != "fix")) {
      fail_at(file, it->first, child,
              parent == "fix" ? "cannot be overridden by a fix"
                              : fmt::format("cannot be overridden by {}", parent));
    }
    validate(file, it->second, child);
    return;
  }
  if (parent == "rank_env") {
    int64_t r = -1;
    if (!YAML::convert<int64_t>::decode(it->first, r) || r < 0 || r > 255) {
      fail_at(file, it->first, child, "rank_env keys are ranks (allowed 0-255)");
    }
    if (!it->second.IsMap()) fail_at(file, it->second, child, "expected a map of strings");
    for (auto e = it->second.begin(); e != it->second.end(); ++e) {
      if (!e->second.IsScalar()) {
        fail_at(file, e->second, child + "." + e->first.Scalar(), "expected a string");
      }
    }
    return;
  }
  if (find_spec(sp) == nullptr) {
    auto allowed = children_of(parent);
    std::string best;
    size_t best_d = 3;
    for (auto& a : allowed) {
      const size_t d = edit_distance(key, a);
      if (d < best_d) best_d = d, best = a;
    }
    fail_at(file, it->first, child,
            fmt::format("unknown key{} (allowed here: {})",
                        best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best),
                        fmt::join(allowed, ", ")));
  }
  validate(file, it->second, child);
}

void validate(const std::string& file, const YAML::Node& node, const std::string& path) {
  const std::string sp = strip_override_section(schema_path(path));
  const KeySpec* k = find_spec(sp);
  if (k == nullptr) fail_at(file, node, path, "unknown key");
  if (node.IsNull())
    fail_at(file, node, path, fmt::format("expected {}, got nothing", key_type_name(*k)));
  switch (k->type) {
    case K::kSection:
      if (sp == "fix" || sp == "prepare" || sp == "baseline") {
        return validate_map(file, node, sp);
      }
      return validate_map(file, node, path);
    case K::kStringMap:
      if (!node.IsMap()) fail_at(file, node, path, "expected a map of strings");
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->second.IsScalar()) {
          fail_at(file, it->second, path + "." + it->first.Scalar(), "expected a string");
        }
      }
      return;
    case K::kIntList:
      if (!node.IsSequence()) fail_at(file, node, path, "expected a list of integers");
      for (size_t i = 0; i < node.size(); ++i) {
        int64_t x = 0;
        if (!node[i].IsScalar() || !YAML::convert<int64_t>::decode(node[i], x)) {
          fail_at(file, node[i], fmt::format("{}[{}]", path, i), "expected an integer");
        }
      }
      return;
    case K::kList:
      if (!node.IsSequence()) fail_at(file, node, path, "expected a list");
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string item = fmt::format("{}[{}]", path, i);
        if (sp == "faults") {
          ErrorCollector::check([&] { validate_fault(file, node[i], item); });
        } else if (sp == "expect.of") {
          ErrorCollector::check([&] { validate_map(file, node[i], item); });
        } else if (!node[i].IsScalar()) {
          fail_at(file, node[i], item, "expected a string");
        } else if (sp == "workload.plugins") {
          check_identifier(file, node[i], item);
        } else if (sp == "reference.needs") {
          check_needed_key(file, node[i], item);
        }
      }
      return;
    default:
      check_scalar(file, node, path, *k);
      if (k->check) k->check(file, node, path);
  }
}

void validate_fault(const std::string& file, const YAML::Node& fault, const std::string& item) {
  const size_t before = ErrorCollector::count();
  validate_map(file, fault, item);
  if (ErrorCollector::count() > before) return;  // the kind count would only repeat a bad key
  // One kind per item: a plan or one registered fault kind (harness/faults/); `restart: true`
  // beside a kind is its modifier.
  std::vector<std::string> names = {"plan"}, found;
  if (fault["plan"]) found.push_back("plan");
  for (const auto* k : faults::fault_kinds()) {
    names.push_back(k->key());
    if (fault[k->key()] && k->key() != "restart") found.push_back(k->key());
  }
  if (found.empty() && !fault["restart"]) {
    fail_at(file, fault, item, fmt::format("names no fault (one of: {})", fmt::join(names, ", ")));
  }
  if (found.size() > 1) {
    fail_at(file, fault, item,
            fmt::format("names two faults, {} and {} (one per item; add another item)", found[0],
                        found[1]));
  }
  if (fault["plan"]) {
    fault::Plan plan;
    try {
      plan = fault::parse_plan(fault["plan"].Scalar(), "plan");
    } catch (const std::exception& e) {
      fail_at(file, fault["plan"], item + ".plan", e.what());
    }
    check_sites(file, fault["plan"], item + ".plan", plan);
  }
}

}  // namespace

// Deep merge: maps merge key by key, everything else is replaced by `over`. Linear in the keys:
// yaml-cpp looks a map key up by scanning every key (node[key] in a loop over a 40k-key env map
// took 104 s), so keys are matched through a hash table and inserted without a lookup.
YAML::Node merge(const YAML::Node& base, const YAML::Node& over) {
  if (!base || !base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  std::unordered_map<std::string, YAML::Node> over_by_key;
  over_by_key.reserve(over.size());
  for (auto it = over.begin(); it != over.end(); ++it) {
    over_by_key.emplace(it->first.Scalar(), it->second);  // node[key] finds the first one too
  }
  YAML::Node out(YAML::NodeType::Map);
  std::unordered_set<std::string> placed;
  placed.reserve(base.size() + over.size());
  for (auto it = base.begin(); it != base.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (!placed.insert(key).second) continue;
    const auto o = over_by_key.find(key);
    out.force_insert(
        key, o == over_by_key.end() ? YAML::Clone(it->second) : merge(it->second, o->second));
  }
  for (auto it = over.begin(); it != over.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (placed.insert(key).second) out.force_insert(key, YAML::Clone(it->second));
  }
  return out;
}

YAML::Node load_file(const std::string& path, std::vector<std::string>& chain) {
  if (std::find(chain.begin(), chain.end(), fs::weakly_canonical(path).string()) != chain.end()) {
    raise<ScenarioError>("{}: extends: cycle ({} -> {})", path, fmt::join(chain, " -> "), path);
  }
  chain.push_back(fs::weakly_canonical(path).string());
  if (!fs::exists(path)) raise<ScenarioError>("{}: no such scenario file", path);
  if (fs::is_directory(path)) raise<ScenarioError>("{}: not a scenario file (a directory)", path);
  if (!fs::is_regular_file(path)) {
    raise<ScenarioError>("{}: not a scenario file (not a regular file)", path);
  }
  YAML::Node doc = read_scenario_file(path);
  if (!doc || doc.IsNull()) raise<ScenarioError>("{}: the file is empty", path);
  if (!doc.IsMap()) {
    raise<ScenarioError>("{}: not a scenario file (expected a YAML map of keys, found {})", path,
                         doc.IsSequence() ? "a list" : "plain text");
  }
  ErrorCollector errors;
  check_duplicate_keys(path, doc, "");
  validate_map(path, doc, "");
  ErrorCollector::throw_if_any(path);
  if (doc["extends"]) {
    const fs::path base = fs::path(path).parent_path() / doc["extends"].Scalar();
    YAML::Node b = load_file(base.string(), chain);
    b.remove("name");  // a variant names itself
    YAML::Node self = YAML::Clone(doc);
    self.remove("extends");
    doc = merge(b, self);
  }
  return doc;
}

namespace {

// The schema's defaults as one tree, parsed once per thread: every scenario load merges them, and
// parsing each key's default text again was a quarter of `triage --eval`'s time (stop 56).
YAML::Node build_defaults() {
  YAML::Node d(YAML::NodeType::Map);
  for (const auto& k : scenario_schema()) {
    if (k.default_value.empty() || k.type == K::kSection || k.path.find('[') != std::string::npos ||
        k.path.rfind("fix", 0) == 0 || k.path.rfind("prepare", 0) == 0 ||
        k.path.rfind("baseline", 0) == 0) {
      continue;
    }
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t dot; (dot = k.path.find('.', start)) != std::string::npos; start = dot + 1) {
      parts.push_back(k.path.substr(start, dot - start));
    }
    const std::string leaf = k.path.substr(start);
    std::vector<YAML::Node> stack{d};
    for (auto& p : parts) {
      YAML::Node next = stack.back()[p];
      if (!next.IsMap()) {
        stack.back()[p] = YAML::Node(YAML::NodeType::Map);
        next = stack.back()[p];
      }
      stack.push_back(next);
    }
    stack.back()[leaf] = YAML::Load(k.default_value);
  }
  return d;
}

}  // namespace

YAML::Node defaults() {
  // yaml-cpp nodes share their memory, so each caller gets its own copy to change.
  thread_local const YAML::Node parsed = build_defaults();
  return YAML::Clone(parsed);
}

namespace {

// One step of a --set path: a key, with a list index ("faults[0]") or without (-1).
struct PathStep {
  std::string key;
  int64_t index = -1;
};

std::vector<PathStep> parse_set_path(const std::string& text, const std::string& path) {
  std::vector<PathStep> out;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    PathStep st{part};
    const size_t open = part.find('[');
    if (open != std::string::npos) {
      const std::string digits = part.substr(open + 1, part.size() - open - 2);
      if (part.back() != ']' || digits.empty() || digits.size() > 6 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        raise<ScenarioError>("--set '{}': '{}' is not a key or key[index]", text, part);
      }
      st.key = part.substr(0, open);
      st.index = std::stoll(digits);
    }
    if (st.key.empty()) raise<ScenarioError>("--set '{}': an empty key in '{}'", text, path);
    out.push_back(std::move(st));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

// The list item parent[st.key][st.index]: an existing one, or a new one right after the last.
YAML::Node list_item(YAML::Node parent, const PathStep& st, const std::string& text,
                     const YAML::Node* value) {
  YAML::Node list = parent[st.key];
  if (!list.IsSequence()) {
    if (list.IsDefined() && !list.IsNull()) {
      raise<ScenarioError>("--set '{}': {} is not a list", text, st.key);
    }
    parent[st.key] = YAML::Node(YAML::NodeType::Sequence);
    list = parent[st.key];
  }
  const auto n = static_cast<int64_t>(list.size());
  if (st.index > n) {
    raise<ScenarioError>("--set '{}': {} has {} item(s) (allowed index 0-{}; index {} adds one)",
                         text, st.key, n, std::max<int64_t>(0, n - 1), n);
  }
  if (st.index == n) {
    list.push_back(value != nullptr ? *value : YAML::Node(YAML::NodeType::Map));
  } else if (value != nullptr) {
    list[static_cast<size_t>(st.index)] = *value;
  }
  return list[static_cast<size_t>(st.index)];
}

}  // namespace

// Applies "key.path=value"; list items are addressed as key[index] (faults[0].plan=...; the
// index one past the last adds an item). The value is checked like the file's own text, and a
// changed list item makes its whole list validated again, so an override cannot leave a scenario
// the loader would refuse from a file (a resolved scenario that verdict and replay cannot load).
void apply_override(YAML::Node& doc, const std::string& text, const std::string& file) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    raise<ScenarioError>("--set '{}': expected key.path=value", text);
  }
  const std::string path = text.substr(0, eq);
  if (path == "extends" || path.rfind("extends.", 0) == 0 || path.rfind("extends[", 0) == 0) {
    // The bases are merged when the file is read, before any --set: one here would be ignored.
    raise<ScenarioError>(
        "--set '{}': extends cannot be overridden (the bases are merged when the file is read, "
        "before --set applies); put extends: in the scenario file",
        text);
  }
  const std::string where = file + " (--set " + path + ")";
  YAML::Node value = parse_scenario_text(where, text.substr(eq + 1));
  const size_t before = ErrorCollector::count();
  check_duplicate_keys(where, value, path);  // collected, or thrown without a collector
  if (ErrorCollector::count() > before) return;
  const std::vector<PathStep> steps = parse_set_path(text, path);
  std::string spec_path = strip_override_section(schema_path(path));
  if (spec_path.size() > 2 && spec_path.ends_with("[]")) spec_path.resize(spec_path.size() - 2);
  if (find_spec(spec_path) == nullptr) {
    const size_t dot = path.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : schema_path(path.substr(0, dot));
    if (path.find('[') != std::string::npos) {
      raise<ScenarioError>("--set '{}': unknown key {} (allowed under {}: {})", text, path,
                           parent.empty() ? "the top level" : parent,
                           fmt::join(children_of(parent), ", "));
    }
    // yaml-cpp's Node::operator= writes through, so walk with fresh handles.
    YAML::Node probe(YAML::NodeType::Map);
    std::vector<YAML::Node> chain{probe};
    for (size_t i = 0; i + 1 < steps.size(); ++i) {
      chain.back()[steps[i].key] = YAML::Node(YAML::NodeType::Map);
      chain.push_back(chain.back()[steps[i].key]);
    }
    chain.back()[steps.back().key] = value;
    const size_t errors = ErrorCollector::count();
    validate_map("--set " + path, probe, "");  // reports an unknown key with suggestions
    if (ErrorCollector::count() > errors) return;
  }
  std::vector<YAML::Node> stack{doc};
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PathStep& st = steps[i];
    if (st.index >= 0) {
      stack.push_back(list_item(stack.back(), st, text, nullptr));
      continue;
    }
    YAML::Node next = stack.back()[st.key];
    if (!next.IsMap()) {
      stack.back()[st.key] = YAML::Node(YAML::NodeType::Map);
      next = stack.back()[st.key];
    }
    stack.push_back(next);
  }
  if (steps.back().index >= 0) {
    list_item(stack.back(), steps.back(), text, &value);
  } else {
    stack.back()[steps.back().key] = value;
  }
  if (path.find('[') == std::string::npos) {
    // A key of a map of free keys (env.FOO, rank_env.1.VAR) has no spec of its own: the nearest
    // map that has one is validated.
    size_t k = steps.size();
    std::string prefix = path;
    while (k > 1 && find_spec(strip_override_section(schema_path(prefix))) == nullptr) {
      prefix.resize(prefix.rfind('.'));
      --k;
    }
    validate(where, k == steps.size() ? value : stack[k], prefix);
  } else {
    // A list item changed: the list is validated again as a whole (one kind per fault item,
    // the plan's grammar and sites).
    validate(where, doc[steps.front().key], steps.front().key);
  }
}

}  // namespace fl::harness::loader
