// Loading a scenario: the file validated against the schema (validate.cpp), `extends:` merged,
// the fix and --set overrides applied, defaults filled in, then the checks across keys (layout,
// ranks named by faults, symptom ids of the taxonomy) and the typed Scenario.
#include "harness/scenario/scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/settings.hpp"
#include "harness/faults/fault.hpp"
#include "harness/run/launcher.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kTaxonomyPath, std::string, "FAULTLINE_TAXONOMY", "",
                  "Taxonomy file scenarios are checked against (default: scenarios/taxonomy.yaml "
                  "of the source tree)");

using loader::apply_override;
using loader::defaults;
using loader::ErrorCollector;
using loader::fail_at;
using loader::load_file;
using loader::merge;
using loader::parse_hosts;

namespace {

template <class T>
T get(const YAML::Node& n, const char* a, const char* b = nullptr, const char* c = nullptr) {
  YAML::Node x = n[a];
  if (b) x = x[b];
  if (c) x = x[c];
  return x.as<T>();
}

// A key of a list item (list items get no schema defaults filled in).
}  // namespace

const Taxonomy::Symptom* Taxonomy::symptom(const std::string& id) const {
  for (const auto& s : symptoms) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

const Taxonomy& taxonomy() {
  static const Taxonomy t = [] {
    std::string path = kTaxonomyPath.get();
    if (path.empty()) path = std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/taxonomy.yaml";
    Taxonomy out;
    YAML::Node doc;
    try {
      doc = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      raise<ScenarioError>("{}: cannot load the taxonomy: {}", path, e.what());
    }
    for (const auto& st : doc["stages"]) {
      for (const auto& s : st["symptoms"]) {
        out.symptoms.push_back(
            {s["id"].as<std::string>(), s["name"].as<std::string>(), st["id"].as<int>()});
      }
      for (const auto& r : st["root_causes"]) out.root_causes.push_back(r["id"].as<std::string>());
    }
    for (const auto& f : doc["fix_patterns"]) out.fix_patterns.push_back(f["id"].as<std::string>());
    return out;
  }();
  return t;
}

std::vector<std::string> scenario_files_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file() && it->path().extension() == ".yaml") out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Scenario load_scenario(const std::string& path, const LoadOptions& opts) {
  // The checks below that do not depend on each other report together (ErrorCollector).
  ErrorCollector errors;
  std::vector<std::string> chain;
  YAML::Node doc = load_file(path, chain);
  if (!doc["name"]) {
    raise<ScenarioError>("{}: name: required key is missing (a scenario names itself)", path);
  }
  const bool has_fix = static_cast<bool>(doc["fix"]);
  if (opts.apply_fix) {
    if (!has_fix) raise<ScenarioError>("{}: fix: --fix given but the scenario has no fix", path);
    YAML::Node fix = YAML::Clone(doc["fix"]);
    doc = merge(doc, fix);
  }
  for (const auto& o : opts.overrides) {
    ErrorCollector::check([&] { apply_override(doc, o, path); });
  }
  ErrorCollector::throw_if_any(path);
  YAML::Node r = merge(defaults(), doc);
  r.remove("extends");

  Scenario s;
  s.file = path;
  s.has_fix = has_fix;
  s.name = get<std::string>(r, "name");
  ErrorCollector::check([&] {
    for (char ch : s.name) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
        fail_at(path, doc["name"], "name",
                fmt::format("'{}' has '{}' (allowed: letters, digits, '-', '_', '.')", s.name, ch));
      }
    }
  });
  s.description = get<std::string>(r, "description");
  s.seed = get<uint64_t>(r, "seed");
  loader::parse_reference(path, doc, r, s);  // reference.cpp
  const Taxonomy& tax = taxonomy();
  auto check_symptom = [&](const std::string& id, const char* key, const YAML::Node& at) {
    if (id.empty() || tax.symptom(id)) return;
    std::vector<std::string> ids;
    for (auto& x : tax.symptoms) ids.push_back(x.id);
    ErrorCollector::check([&] {
      fail_at(path, at, key,
              fmt::format("unknown symptom id '{}' (allowed: {})", id, fmt::join(ids, ", ")));
    });
  };
  check_symptom(s.ref_symptom, "reference.symptom", doc["reference"]["symptom"]);
  ErrorCollector::check([&] {
    if (!s.ref_root_cause.empty() &&
        std::count(tax.root_causes.begin(), tax.root_causes.end(), s.ref_root_cause) == 0) {
      fail_at(path, doc["reference"]["root_cause"], "reference.root_cause",
              fmt::format("unknown root cause '{}' (allowed: {})", s.ref_root_cause,
                          fmt::join(tax.root_causes, ", ")));
    }
  });
  ErrorCollector::check([&] {
    if (!s.ref_fix_pattern.empty() &&
        std::count(tax.fix_patterns.begin(), tax.fix_patterns.end(), s.ref_fix_pattern) == 0) {
      fail_at(path, doc["reference"]["fix_pattern"], "reference.fix_pattern",
              fmt::format("unknown fix pattern '{}' (allowed: {})", s.ref_fix_pattern,
                          fmt::join(tax.fix_patterns, ", ")));
    }
  });

  auto t = r["topology"];
  s.ranks = t["ranks"].as<int>();
  s.nodes = t["nodes"].as<int>();
  s.backend = t["backend"].as<std::string>();
  s.launcher = t["launcher"].as<std::string>();
  const bool auto_launcher = s.launcher == "auto";  // chosen below, once the world is known
  if (auto_launcher) s.launcher = "local";          // what the checks until then see
  s.network = t["network"].as<std::string>();
  ErrorCollector::check([&] {
    if (s.network == "namespaces" && !launcher_has_rank_processes(s.launcher)) {
      fail_at(path, doc["topology"]["network"], "topology.network",
              "network namespaces need topology.launcher: " + rank_process_launchers());
    }
  });
  parse_hosts(path, doc, t, s);  // hosts.cpp
  s.tp = t["tp"].as<int>();
  s.pp = t["pp"].as<int>();
  s.zero = t["zero"].as<int>();
  s.dp = t["dp"].as<int>();
  if (s.dp == 0) s.dp = std::max(1, s.ranks / (s.tp * s.pp));
  ErrorCollector::check([&] {
    if (s.ranks % s.nodes != 0) {
      fail_at(path, doc["topology"]["nodes"] ? doc["topology"]["nodes"] : doc["topology"],
              "topology.nodes",
              fmt::format("{} ranks do not spread evenly over {} nodes (allowed: a divisor of {})",
                          s.ranks, s.nodes, s.ranks));
    }
  });
  ErrorCollector::check([&] {
    if (s.dp * s.tp * s.pp != s.ranks) {
      fail_at(path, doc["topology"] ? doc["topology"] : doc, "topology",
              fmt::format("dp {} x tp {} x pp {} = {} but ranks is {} (they must be equal)", s.dp,
                          s.tp, s.pp, s.dp * s.tp * s.pp, s.ranks));
    }
  });
  loader::parse_workload(path, doc, r, s);  // workload.cpp
  for (const auto& d : r["detectors"]) s.detectors.push_back(d.as<std::string>());
  s.recovery = r["recovery"].as<std::string>();

  std::string chosen;  // topology.launcher: auto: the launcher chosen (before kind: command's)
  if (auto_launcher) {
    auto choice = loader::choose_launcher(path, r, s);  // launcher_choice.cpp
    s.launcher = chosen = std::move(choice.launcher);
    s.launcher_reason = std::move(choice.reason);
  }
  std::vector<std::pair<std::string, YAML::Node>> squats;  // port_squat items: key path, node
  const YAML::Node resolved_faults = r["faults"];
  const YAML::Node doc_faults = static_cast<const YAML::Node&>(doc)["faults"];
  for (size_t fi = 0; fi < resolved_faults.size(); ++fi) {
    // Each fault is checked on its own.
    ErrorCollector::check([&] {
      // The document's own node where it has one: its marks give errors their line and column.
      const YAML::Node f = doc_faults && doc_faults.IsSequence() && fi < doc_faults.size()
                               ? doc_faults[fi]
                               : resolved_faults[fi];
      const std::string at = fmt::format("faults[{}]", fi);
      if (f["plan"]) {
        s.plans.push_back(f["plan"].as<std::string>());
        return;
      }
      if (auto fault = faults::parse_fault({path, at, s}, f)) {
        if (fault->kind == "port_squat") squats.emplace_back(at, f["port_squat"]);
        s.oop_faults.push_back(std::move(fault));
      }
    });
  }
  // What the run cannot do with its ranks in network namespaces (a network fault or
  // topology.network: namespaces put them there): known now, not when the run reaches it.
  if (s.network == "namespaces") {
    if (!s.workload.fetch.empty()) {
      ErrorCollector::check([&] {
        const YAML::Node doc_fetch = static_cast<const YAML::Node&>(doc)["workload"]
                                         ? static_cast<const YAML::Node&>(doc)["workload"]["fetch"]
                                         : YAML::Node();
        fail_at(path, doc_fetch ? doc_fetch : doc, "workload.fetch",
                "cannot fetch with network namespaces (the ranks cannot reach the run's artifact "
                "hub on 127.0.0.1; a network fault or topology.network: namespaces puts them "
                "there; allowed: fetch with topology.network: host and no network fault)");
      });
    }
    for (const auto& [at, node] : squats) {
      ErrorCollector::check([&] {
        fail_at(path, node, at + ".port_squat",
                "port_squat with network namespaces is not supported (the port is held on the "
                "host, the ranks' store listens in their own namespace; allowed: port_squat with "
                "topology.network: host and no network fault)");
      });
    }
  }

  loader::check_command_workload(path, static_cast<const YAML::Node&>(doc), s);

  s.expect = loader::parse_expect(path, r["expect"], doc["expect"], "expect");
  check_symptom(s.expect.symptom, "expect.symptom", doc["expect"]["symptom"]);
  loader::parse_side_runs(path, doc, s);

  s.run_timeout_s = r["timeouts"]["run_s"].as<double>();
  s.comm_timeout_ms = r["timeouts"]["comm_ms"].as<int64_t>();
  s.rendezvous_timeout_ms = r["timeouts"]["rendezvous_ms"].as<int64_t>();
  for (auto it = r["env"].begin(); it != r["env"].end(); ++it) {
    s.env[it->first.Scalar()] = it->second.Scalar();
  }
  if (r["rank_env"]) {
    for (auto it = r["rank_env"].begin(); it != r["rank_env"].end(); ++it) {
      const int rank = it->first.as<int>();
      if (rank >= s.ranks) {
        // (yaml-cpp's Node::operator= writes through: keep the matching key in a fresh handle.)
        std::optional<YAML::Node> at;
        for (auto k = doc["rank_env"].begin(); k != doc["rank_env"].end(); ++k) {
          if (k->first.Scalar() == it->first.Scalar()) at.emplace(k->first);
        }
        ErrorCollector::check([&] {
          fail_at(path, at ? *at : doc["rank_env"], "rank_env",
                  fmt::format("rank {} does not exist (allowed 0-{})", rank, s.ranks - 1));
        });
        continue;
      }
      for (auto v = it->second.begin(); v != it->second.end(); ++v) {
        s.rank_env[rank][v->first.Scalar()] = v->second.Scalar();
      }
    }
  }
  r.remove("fix");
  if (has_fix && !opts.apply_fix) r["fix"] = YAML::Clone(doc["fix"]);
  if (doc["prepare"]) {
    // The preparation run: this scenario without its faults and expectation, with the prepare
    // overrides applied; it must complete.
    s.prepare_yaml = loader::side_run_yaml(
        doc, {"prepare", "fix", "faults", "expect", "rank_env", "after_prepare", "baseline"},
        doc["prepare"], s.name + "-prepare");
  }
  if (auto_launcher) {  // the side runs run under the launcher the run was given
    loader::pin_side_run_launcher(s.prepare_yaml, chosen);
    loader::pin_side_run_launcher(s.baseline_yaml, chosen);
  }
  loader::check_launch_inputs(path, static_cast<const YAML::Node&>(doc), s);
  ErrorCollector::throw_if_any(path);
  s.resolved = r;
  return s;
}

}  // namespace fl::harness
