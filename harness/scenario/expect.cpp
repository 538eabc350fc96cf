// The parts of a scenario beyond one run: its expectation (with the oracles `any` / `all`
// combining several, each item an expect map of its own), the command run between the
// preparation run and the run (`after_prepare`), and the reference run of the baseline oracle
// (`baseline:`). Errors are file:line:col with the key path and what is allowed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/oracles/oracle.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {

// The node of the document where it has one (its marks give errors their line and column).
YAML::Node at_or(const YAML::Node& doc_node, const char* key, const YAML::Node& fallback) {
  if (doc_node && doc_node.IsMap() && doc_node[key]) return doc_node[key];
  return fallback;
}

bool uses_oracle(const Expect& x, const std::string& name) {
  if (x.oracle == name) return true;
  return std::any_of(x.of.begin(), x.of.end(),
                     [&](const Expect& i) { return uses_oracle(i, name); });
}

}  // namespace

// The programs after_prepare may run: the project's own tools, by name.
const std::vector<std::string>& after_prepare_tools() {
  static const std::vector<std::string> t = {"fl-ckpt"};
  return t;
}

namespace {

// any / all: the expectations they combine, each an expect map of its own.
void parse_combined(const std::string& file, const YAML::Node& e, const YAML::Node& doc_node,
                    const std::string& path, Expect& x) {
  const YAML::Node here = doc_node ? doc_node : e;
  const bool combines = x.oracle == "any" || x.oracle == "all";
  const YAML::Node of = e["of"];
  ErrorCollector::check([&] {
    if (combines && of.size() == 0) {
      fail_at(file, at_or(doc_node, "oracle", here), path + ".oracle",
              fmt::format("the {} oracle needs expect.of: a list of the expectations it combines "
                          "(allowed: one or more maps of expect keys)",
                          x.oracle));
    }
    if (!combines && of.size() > 0) {
      fail_at(file, at_or(doc_node, "of", here), path + ".of",
              fmt::format("expect.of is for the oracles any and all (this expectation's oracle "
                          "is {})",
                          x.oracle));
    }
  });
  if (!combines) return;
  const YAML::Node doc_of = doc_node && doc_node.IsMap() ? doc_node["of"] : YAML::Node();
  const YAML::Node item_defaults = defaults()["expect"];
  for (size_t i = 0; i < of.size(); ++i) {
    const YAML::Node d = doc_of && doc_of.IsSequence() && i < doc_of.size() ? doc_of[i] : of[i];
    YAML::Node item = merge(item_defaults, of[i]);
    // An item inherits the symptom it stands for; `of` of its own only through its own keys.
    if (!of[i]["symptom"]) item["symptom"] = x.symptom;
    x.of.push_back(parse_expect(file, item, d, fmt::format("{}.of[{}]", path, i)));
  }
}

}  // namespace

Expect parse_expect(const std::string& file, const YAML::Node& e, const YAML::Node& doc_node,
                    const std::string& path) {
  Expect x;
  x.symptom = e["symptom"].as<std::string>();
  x.oracle = e["oracle"].as<std::string>();
  x.within_s = e["within_s"].as<double>();
  x.absent = e["absent"].as<bool>();
  x.ranks = e["ranks"].as<std::vector<int>>();
  // The oracle's own keys, parsed by the oracle (harness/oracles/).
  if (const auto* oracle = oracles::find(x.oracle)) {
    ErrorCollector::check([&] { x.params = oracle->parse({file, e, doc_node, path}); });
  }
  parse_combined(file, e, doc_node, path, x);
  return x;
}

void parse_side_runs(const std::string& file, const YAML::Node& doc, Scenario& s) {
  const YAML::Node cmd = doc["after_prepare"];
  if (cmd && cmd.IsSequence() && cmd.size() > 0) {
    ErrorCollector::check([&] {
      if (!doc["prepare"]) {
        fail_at(file, cmd, "after_prepare",
                "runs after the preparation run, and this scenario has no prepare: (allowed: "
                "after_prepare with prepare:)");
      }
    });
    const auto& tools = after_prepare_tools();
    for (size_t i = 0; i < cmd.size(); ++i) {
      const std::string a = cmd[i].as<std::string>();
      const std::string key = fmt::format("after_prepare[{}]", i);
      ErrorCollector::check([&] {
        if (i == 0 && std::find(tools.begin(), tools.end(), a) == tools.end()) {
          fail_at(file, cmd[i], key,
                  fmt::format("'{}' is not a tool after_prepare may run (allowed: {})", a,
                              fmt::join(tools, ", ")));
        }
        // Paths stay inside the run directory: relative, without a '..' component.
        bool dotdot = false;
        for (size_t p = 0; (p = a.find("..", p)) != std::string::npos; p += 2) {
          const bool start = p == 0 || a[p - 1] == '/' || a[p - 1] == '=';
          const bool end = p + 2 == a.size() || a[p + 2] == '/';
          dotdot |= start && end;
        }
        if (i > 0 && (a.empty() || a[0] == '/' || a[0] == '~' || dotdot ||
                      a.find("=/") != std::string::npos)) {
          fail_at(file, cmd[i], key,
                  fmt::format("'{}' is not allowed (allowed: words and paths inside the run "
                              "directory: relative, without '..')",
                              a));
        }
      });
      s.side_runs.after_prepare.push_back(a);
    }
  }
  if (!uses_oracle(s.expect, "baseline")) {
    ErrorCollector::check([&] {
      if (doc["baseline"]) {
        fail_at(file, doc["baseline"], "baseline",
                fmt::format("the reference run is for the baseline oracle, and expect.oracle is "
                            "{} (allowed: baseline: with oracle baseline, alone or in any/all)",
                            s.expect.oracle));
      }
    });
    return;
  }
  // The reference run: this scenario without its faults, tools and expectation (it must
  // complete), with the baseline overrides applied.
  s.side_runs.baseline_yaml = side_run_yaml(
      doc, {"baseline", "fix", "faults", "expect", "rank_env", "detectors", "recovery"},
      doc["baseline"], s.name + "-baseline");
}

std::string side_run_yaml(const YAML::Node& doc, std::initializer_list<const char*> drop,
                          const YAML::Node& overrides, const std::string& name) {
  YAML::Node run = YAML::Clone(doc);
  for (const char* k : drop) run.remove(k);
  if (overrides) run = merge(run, YAML::Clone(overrides));
  run["name"] = name;
  YAML::Node completed(YAML::NodeType::Map);
  completed["oracle"] = "completed";
  run["expect"] = completed;
  YAML::Emitter em;
  em << run;
  return em.c_str();
}

}  // namespace fl::harness::loader

namespace fl::harness {

Expect parse_expect_text(const std::string& yaml) {
  const std::string file = "<expect>";
  loader::ErrorCollector errors;
  const YAML::Node node = loader::parse_scenario_text(file, yaml);
  if (!node.IsMap()) raise<ScenarioError>("{}: expected an expect map", file);
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = "expect." + it->first.Scalar();
    const auto& schema = scenario_schema();
    if (std::none_of(schema.begin(), schema.end(),
                     [&](const KeySpec& k) { return k.path == key; })) {
      loader::fail_at(file, it->first, key, "unknown key");
    }
  }
  Expect x =
      loader::parse_expect(file, loader::merge(loader::defaults()["expect"], node), node, "expect");
  loader::ErrorCollector::throw_if_any(file);
  return x;
}

}  // namespace fl::harness
