// Loading a scenario: the file validated against the schema (validate.cpp), `extends:` merged,
// the fix and --set overrides applied, defaults filled in, then the checks across keys (layout,
// ranks named by faults, symptom ids of the taxonomy) and the typed Scenario.
#include "harness/model/scenario.hpp"

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
#include "harness/launch/launcher.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/key_checks.hpp"
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
    if (path.empty()) path = std::string(this_build::source_dir()) + "/scenarios/taxonomy.yaml";
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

namespace {

// What the parsers below share: the scenario file (for errors), the document as written (its
// marks give errors their line and column; non-const: a missing key reads as an undefined node)
// and the resolved document (every key, defaults filled in).
struct Source {
  const std::string& file;
  YAML::Node& doc;
  YAML::Node& r;
};

// The file and its `extends:` bases, with the fix and the --set overrides applied.
YAML::Node read_document(const std::string& path, const LoadOptions& opts, bool& has_fix) {
  std::vector<std::string> chain;
  YAML::Node doc = load_file(path, chain);
  if (!doc["name"]) {
    raise<ScenarioError>("{}: name: required key is missing (a scenario names itself)", path);
  }
  has_fix = static_cast<bool>(doc["fix"]);
  if (opts.apply_fix) {
    if (!has_fix) raise<ScenarioError>("{}: fix: --fix given but the scenario has no fix", path);
    YAML::Node fix = YAML::Clone(doc["fix"]);
    doc = merge(doc, fix);
  }
  for (const auto& o : opts.overrides) {
    ErrorCollector::check([&] { apply_override(doc, o, path); });
  }
  ErrorCollector::throw_if_any(path);
  return doc;
}

void parse_identity(const Source& c, Scenario& s) {
  s.name = get<std::string>(c.r, "name");
  ErrorCollector::check([&] {
    for (char ch : s.name) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
        fail_at(c.file, c.doc["name"], "name",
                fmt::format("'{}' has '{}' (allowed: letters, digits, '-', '_', '.')", s.name, ch));
      }
    }
  });
  s.description = get<std::string>(c.r, "description");
  s.seed = get<uint64_t>(c.r, "seed");
}

// A symptom id of the taxonomy ("" passes).
void check_symptom(const Source& c, const std::string& id, const char* key, const YAML::Node& at) {
  const Taxonomy& tax = taxonomy();
  if (id.empty() || tax.symptom(id)) return;
  std::vector<std::string> ids;
  for (auto& x : tax.symptoms) ids.push_back(x.id);
  ErrorCollector::check([&] {
    fail_at(c.file, at, key,
            fmt::format("unknown symptom id '{}' (allowed: {})", id, fmt::join(ids, ", ")));
  });
}

// An id of one of the taxonomy's lists ("" passes).
void check_listed(const Source& c, const std::string& id, const std::vector<std::string>& ids,
                  const char* what, const char* key) {
  ErrorCollector::check([&] {
    if (!id.empty() && std::count(ids.begin(), ids.end(), id) == 0) {
      fail_at(c.file, c.doc["reference"][key], fmt::format("reference.{}", key),
              fmt::format("unknown {} '{}' (allowed: {})", what, id, fmt::join(ids, ", ")));
    }
  });
}

// reference: (reference.cpp) and its taxonomy ids.
void parse_reference(const Source& c, Scenario& s) {
  loader::parse_reference(c.file, c.doc, c.r, s);
  check_symptom(c, s.ref.symptom, "reference.symptom", c.doc["reference"]["symptom"]);
  check_listed(c, s.ref.root_cause, taxonomy().root_causes, "root cause", "root_cause");
  check_listed(c, s.ref.fix_pattern, taxonomy().fix_patterns, "fix pattern", "fix_pattern");
}

// dp as the loader reads it: 0 (unset) is what the ranks leave after tp and pp.
int resolved_dp(int dp, int ranks, int tp, int pp) {
  return dp != 0 ? dp : std::max(1, ranks / (tp * pp));
}

// The layout: nodes that divide the ranks, dp x tp x pp = ranks.
void check_layout(const Source& c, const Topology& t) {
  ErrorCollector::check([&] {
    if (t.ranks % t.nodes != 0) {
      fail_at(c.file, c.doc["topology"]["nodes"] ? c.doc["topology"]["nodes"] : c.doc["topology"],
              "topology.nodes",
              fmt::format("{} ranks do not spread evenly over {} nodes (allowed: a divisor of {})",
                          t.ranks, t.nodes, t.ranks));
    }
  });
  ErrorCollector::check([&] {
    if (t.dp * t.tp * t.pp != t.ranks) {
      fail_at(c.file, c.doc["topology"] ? c.doc["topology"] : c.doc, "topology",
              fmt::format("dp {} x tp {} x pp {} = {} but ranks is {} (they must be equal)", t.dp,
                          t.tp, t.pp, t.dp * t.tp * t.pp, t.ranks));
    }
  });
}

// topology.nics: the nodes' interfaces besides eth0, which put them in network namespaces.
void parse_nics(const Source& c, Topology& topo) {
  const YAML::Node list = c.r["topology"]["nics"];
  if (!list || list.size() == 0) return;
  const YAML::Node at =
      c.doc["topology"] && c.doc["topology"]["nics"] ? c.doc["topology"]["nics"] : c.doc;
  ErrorCollector::check([&] {
    if (!list.IsSequence() || list.size() > 3) {
      fail_at(c.file, at, "topology.nics",
              "a list of at most 3 interfaces besides eth0 (allowed items: a tc rate such as "
              "8mbit, or unlimited)");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string key = fmt::format("topology.nics[{}]", i);
      const YAML::Node item = at.IsSequence() && i < at.size() ? at[i] : list[i];
      if (!list[i].IsScalar()) {
        fail_at(c.file, item, key, "a tc rate such as 8mbit, or unlimited");
      }
      if (list[i].Scalar() != "unlimited") {
        try {
          loader::check_tc_rate(c.file, item, key);
        } catch (const ScenarioError& e) {
          throw ScenarioError(std::string(e.what()) + " (or unlimited)");
        }
      }
      topo.nics.push_back(list[i].Scalar());
    }
    if (!topo.hosts.empty()) {
      fail_at(c.file, at, "topology.nics",
              "interfaces are made in this machine's network namespaces, not on topology.hosts "
              "(allowed: nics without hosts)");
    }
    if (!launcher_has_rank_processes(topo.launcher)) {
      fail_at(c.file, at, "topology.nics",
              "the nodes' interfaces live in network namespaces, which need topology.launcher: " +
                  rank_process_launchers());
    }
  });
  topo.network = "namespaces";
}

// topology:, hosts included (hosts.cpp). Returns whether the launcher is chosen (auto): until
// then the checks see the local launcher.
bool parse_topology(const Source& c, Scenario& s) {
  auto t = c.r["topology"];
  Topology& topo = s.topo;
  topo.ranks = t["ranks"].as<int>();
  topo.nodes = t["nodes"].as<int>();
  topo.backend = t["backend"].as<std::string>();
  topo.launcher = t["launcher"].as<std::string>();
  const bool auto_launcher = topo.launcher == "auto";
  if (auto_launcher) topo.launcher = "local";
  topo.network = t["network"].as<std::string>();
  topo.omp_num_threads = t["omp_num_threads"].as<std::string>();
  ErrorCollector::check([&] {
    if (topo.network == "namespaces" && !launcher_has_rank_processes(topo.launcher)) {
      fail_at(c.file, c.doc["topology"]["network"], "topology.network",
              "network namespaces need topology.launcher: " + rank_process_launchers());
    }
  });
  parse_hosts(c.file, c.doc, t, s);  // hosts.cpp
  parse_nics(c, topo);
  // deepspeed_topology.cpp
  loader::parse_deepspeed(c.file, c.doc, c.r, s);
  topo.tp = t["tp"].as<int>();
  topo.pp = t["pp"].as<int>();
  topo.zero = t["zero"].as<int>();
  topo.dp = resolved_dp(t["dp"].as<int>(), topo.ranks, topo.tp, topo.pp);
  check_layout(c, topo);
  return auto_launcher;
}

void parse_tools(const Source& c, Scenario& s) {
  for (const auto& d : c.r["detectors"]) s.tools.detectors.push_back(d.as<std::string>());
  s.tools.recovery = c.r["recovery"].as<std::string>();
}

// faults:: plans, and the out-of-process faults parsed by their kinds (harness/faults/). Returns
// the port_squat items (key path, node).
std::vector<std::pair<std::string, YAML::Node>> parse_faults(const Source& c, Scenario& s) {
  std::vector<std::pair<std::string, YAML::Node>> squats;
  const YAML::Node resolved_faults = c.r["faults"];
  const YAML::Node doc_faults = static_cast<const YAML::Node&>(c.doc)["faults"];
  for (size_t fi = 0; fi < resolved_faults.size(); ++fi) {
    // Each fault is checked on its own.
    ErrorCollector::check([&] {
      // The document's own node where it has one: its marks give errors their line and column.
      const YAML::Node f = doc_faults && doc_faults.IsSequence() && fi < doc_faults.size()
                               ? doc_faults[fi]
                               : resolved_faults[fi];
      const std::string at = fmt::format("faults[{}]", fi);
      if (f["plan"]) {
        s.faults.plans.push_back(f["plan"].as<std::string>());
        return;
      }
      if (auto fault = faults::parse_fault(
              {c.file, at, s, launcher_has_rank_processes, rank_process_launchers}, f)) {
        if (fault->kind == "port_squat") squats.emplace_back(at, f["port_squat"]);
        s.faults.oop.push_back(std::move(fault));
      }
    });
  }
  return squats;
}

// What the run cannot do with its ranks in network namespaces (a network fault or
// topology.network: namespaces put them there): known now, not when the run reaches it.
void check_namespaces(const Source& c, const Scenario& s,
                      const std::vector<std::pair<std::string, YAML::Node>>& squats) {
  if (s.topo.network != "namespaces") return;
  const YAML::Node doc_fetch = static_cast<const YAML::Node&>(c.doc)["workload"]
                                   ? static_cast<const YAML::Node&>(c.doc)["workload"]["fetch"]
                                   : YAML::Node();
  if (!s.workload.fetch.empty()) {
    ErrorCollector::check([&] {
      fail_at(c.file, doc_fetch ? doc_fetch : c.doc, "workload.fetch",
              "cannot fetch with network namespaces (the ranks cannot reach the run's artifact "
              "hub on 127.0.0.1; a network fault, topology.nics or topology.network: "
              "namespaces puts them there; allowed: fetch with topology.network: host, no "
              "topology.nics and no network fault)");
    });
  }
  for (const auto& squat : squats) {
    const std::string& at = squat.first;  // (a lambda cannot name a structured binding in clang 14)
    const YAML::Node& node = squat.second;
    ErrorCollector::check([&] {
      fail_at(c.file, node, at + ".port_squat",
              "port_squat with network namespaces is not supported (the port is held on the "
              "host, the ranks' store listens in their own namespace; allowed: port_squat with "
              "topology.network: host, no topology.nics and no network fault)");
    });
  }
}

void parse_timeouts(const Source& c, Scenario& s) {
  s.timeouts.run_s = c.r["timeouts"]["run_s"].as<double>();
  s.timeouts.comm_ms = c.r["timeouts"]["comm_ms"].as<int64_t>();
  s.timeouts.rendezvous_ms = c.r["timeouts"]["rendezvous_ms"].as<int64_t>();
}

// env: and rank_env: (ranks that exist).
void parse_env(const Source& c, Scenario& s) {
  for (auto it = c.r["env"].begin(); it != c.r["env"].end(); ++it) {
    s.env.all[it->first.Scalar()] = it->second.Scalar();
  }
  if (!c.r["rank_env"]) return;
  for (auto it = c.r["rank_env"].begin(); it != c.r["rank_env"].end(); ++it) {
    const int rank = it->first.as<int>();
    if (rank >= s.topo.ranks) {
      // (yaml-cpp's Node::operator= writes through: keep the matching key in a fresh handle.)
      std::optional<YAML::Node> at;
      for (auto k = c.doc["rank_env"].begin(); k != c.doc["rank_env"].end(); ++k) {
        if (k->first.Scalar() == it->first.Scalar()) at.emplace(k->first);
      }
      ErrorCollector::check([&] {
        fail_at(c.file, at ? *at : c.doc["rank_env"], "rank_env",
                fmt::format("rank {} does not exist (allowed 0-{})", rank, s.topo.ranks - 1));
      });
      continue;
    }
    for (auto v = it->second.begin(); v != it->second.end(); ++v) {
      s.env.per_rank[rank][v->first.Scalar()] = v->second.Scalar();
    }
  }
}

// The preparation run: this scenario without its faults and expectation, with the prepare
// overrides applied; it must complete.
void parse_prepare(const Source& c, Scenario& s) {
  if (!c.doc["prepare"]) return;
  s.side_runs.prepare_yaml = loader::side_run_yaml(
      c.doc, {"prepare", "fix", "faults", "expect", "rank_env", "after_prepare", "baseline"},
      c.doc["prepare"], s.name + "-prepare");
}

// Stop 55: a side run (prepare:, baseline:) takes the run's topology and overrides some of it, so
// a --set or a draft that changes the run's layout can leave the side run's dp x tp x pp apart
// from its ranks; say so now, at the side run's key, not when the run reaches it. A side run
// without a topology: of its own has the run's layout (check_layout). A key neither sets is the
// run's resolved one (under the deepspeed launcher the ranks come from its hostfile).
void check_side_run_layout(const Source& c, const Scenario& s, const std::string& yaml,
                           const char* key, const char* what) {
  const YAML::Node side = static_cast<const YAML::Node&>(c.doc)[key];
  if (yaml.empty() || !side || !side.IsMap() || !side["topology"]) return;
  int ranks = s.topo.ranks, tp = s.topo.tp, pp = s.topo.pp, dp = 0;
  try {
    const YAML::Node t = YAML::Load(yaml)["topology"];
    if (t["ranks"]) ranks = t["ranks"].as<int>();
    if (t["tp"]) tp = t["tp"].as<int>();
    if (t["pp"]) pp = t["pp"].as<int>();
    if (t["dp"]) dp = t["dp"].as<int>();
  } catch (const YAML::Exception&) {
    return;  // a value of the wrong type: the side run's own load names it
  }
  if (tp <= 0 || pp <= 0) return;
  dp = resolved_dp(dp, ranks, tp, pp);
  if (dp * tp * pp == ranks) return;
  ErrorCollector::check([&] {
    fail_at(c.file, side["topology"], std::string(key) + ".topology",
            fmt::format("the {} run's layout is dp {} x tp {} x pp {} = {} but ranks is {} (they "
                        "must be equal; it takes the run's topology and overrides what {}: sets)",
                        what, dp, tp, pp, dp * tp * pp, ranks, key));
  });
}

// topology.launcher: auto: the launcher chosen for the world loaded so far (launcher_choice.cpp).
// Returns it (before kind: command's).
std::string choose_launcher(const Source& c, Scenario& s) {
  auto choice = loader::choose_launcher(c.file, c.r, s);
  s.topo.launcher = std::move(choice.launcher);
  s.topo.launcher_reason = std::move(choice.reason);
  return s.topo.launcher;
}

}  // namespace

Scenario load_scenario(const std::string& path, const LoadOptions& opts) {
  // The checks below that do not depend on each other report together (ErrorCollector).
  ErrorCollector errors;
  Scenario s;
  YAML::Node doc = read_document(path, opts, s.has_fix);
  YAML::Node r = merge(defaults(), doc);
  r.remove("extends");
  const Source c{path, doc, r};
  s.file = path;
  parse_identity(c, s);
  parse_reference(c, s);
  const bool auto_launcher = parse_topology(c, s);
  loader::parse_workload(path, static_cast<const YAML::Node&>(doc), r, s);  // workload.cpp
  parse_tools(c, s);
  const std::string chosen = auto_launcher ? choose_launcher(c, s) : "";
  check_namespaces(c, s, parse_faults(c, s));
  loader::check_command_workload(path, static_cast<const YAML::Node&>(doc), s);
  s.expect = loader::parse_expect(path, r["expect"], doc["expect"], "expect");
  check_symptom(c, s.expect.symptom, "expect.symptom", doc["expect"]["symptom"]);
  loader::parse_side_runs(path, doc, s);
  parse_timeouts(c, s);
  parse_env(c, s);
  r.remove("fix");
  if (s.has_fix && !opts.apply_fix) r["fix"] = YAML::Clone(doc["fix"]);
  parse_prepare(c, s);
  check_side_run_layout(c, s, s.side_runs.prepare_yaml, "prepare", "preparation");
  check_side_run_layout(c, s, s.side_runs.baseline_yaml, "baseline", "reference");
  if (auto_launcher) {  // the side runs run under the launcher the run was given
    loader::pin_side_run_launcher(s.side_runs.prepare_yaml, chosen);
    loader::pin_side_run_launcher(s.side_runs.baseline_yaml, chosen);
  }
  loader::check_launch_inputs(path, static_cast<const YAML::Node&>(doc), s);
  ErrorCollector::throw_if_any(path);
  s.resolved = r;
  return s;
}

}  // namespace fl::harness
