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
  auto w = r["workload"];
  s.kind = w["kind"].as<std::string>();
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
  s.model = w["model"].as<std::string>();
  s.device = w["device"].as<std::string>();
  s.fidelity = w["fidelity"].as<std::string>();
  s.steps = w["steps"].as<int64_t>();
  s.precision = w["precision"].as<std::string>();
  s.micro_batch = w["micro_batch"].as<int64_t>();
  s.grad_accum = w["grad_accum"].as<int64_t>();
  s.lr = w["lr"].as<double>();
  s.clip = w["clip"].as<double>();
  s.schedule = w["schedule"].as<std::string>();
  s.eval_every = w["eval_every"].as<int64_t>();
  s.loss_scale = w["loss_scale"].as<double>();
  s.min_loss_scale = w["min_loss_scale"].as<double>();
  s.loss_scale_window = w["loss_scale_window"].as<int64_t>();
  s.hysteresis = w["hysteresis"].as<int64_t>();
  s.raise_error_at_min_scale = w["raise_error_at_min_scale"].as<bool>();
  s.optimizer = w["optimizer"].as<std::string>();
  s.momentum = w["momentum"].as<double>();
  s.lr_scaling = w["lr_scaling"].as<std::string>();
  s.warmup_steps = w["warmup_steps"].as<int64_t>();
  s.warmup_style = w["warmup_style"].as<std::string>();
  ErrorCollector::check([&] {
    if (s.momentum != 0 && s.optimizer != "sgd") {
      const YAML::Node d = static_cast<const YAML::Node&>(doc)["workload"];
      fail_at(path, d && d["momentum"] ? d["momentum"] : static_cast<const YAML::Node&>(doc),
              "workload.momentum",
              fmt::format("momentum {} applies to optimizer: sgd only (this workload uses {}; "
                          "allowed: 0, or optimizer: sgd)",
                          s.momentum, s.optimizer));
    }
  });
  ErrorCollector::check([&] {
    if (s.min_loss_scale > s.loss_scale) {
      const YAML::Node d = static_cast<const YAML::Node&>(doc)["workload"];
      fail_at(path,
              d && d["min_loss_scale"] ? d["min_loss_scale"] : static_cast<const YAML::Node&>(doc),
              "workload.min_loss_scale",
              fmt::format("{} is above loss_scale {} (allowed: at most loss_scale)",
                          s.min_loss_scale, s.loss_scale));
    }
  });
  s.samples = w["data"]["samples"].as<int64_t>();
  s.drop_last = w["data"]["drop_last"].as<bool>();
  s.data_seed = w["data"]["seed"].as<int64_t>();
  if (s.data_seed == 0) s.data_seed = static_cast<int64_t>(s.seed);
  s.activation_checkpointing = w["activation_checkpointing"].as<bool>();
  s.zero_init = w["zero"]["init"].as<bool>();
  s.offload_optimizer = w["zero"]["offload_optimizer"].as<bool>();
  s.reduce_bucket_size = w["zero"]["reduce_bucket_size"].as<int64_t>();
  s.allgather_bucket_size = w["zero"]["allgather_bucket_size"].as<int64_t>();
  s.zero3_prefetch_bytes = w["zero"]["prefetch_bytes"].as<int64_t>();
  s.zero3_max_live_bytes = w["zero"]["max_live_bytes"].as<int64_t>();
  s.checkpoint_every = w["checkpoint"]["every"].as<int64_t>();
  s.resume = w["checkpoint"]["resume"].as<bool>();
  s.auto_resume = w["checkpoint"]["auto_resume"].as<bool>();
  s.requests = w["infer"]["requests"].as<int64_t>();
  s.prompt_len = w["infer"]["prompt_len"].as<int64_t>();
  s.new_tokens = w["infer"]["new_tokens"].as<int64_t>();
  s.infer_load = w["infer"]["load"].as<std::string>();
  s.shape_d_model = w["shape"]["d_model"].as<int64_t>();
  s.shape_layers = w["shape"]["layers"].as<int64_t>();
  s.shape_heads = w["shape"]["heads"].as<int64_t>();
  s.shape_seq_len = w["shape"]["seq_len"].as<int64_t>();
  s.eval_samples = w["eval_data"]["samples"].as<int64_t>();
  s.eval_drop_last = w["eval_data"]["drop_last"].as<bool>();
  ErrorCollector::check(
      [&] { loader::check_infer_context(path, static_cast<const YAML::Node&>(doc), s); });
  for (const auto& a : w["args"]) s.extra_args.push_back(a.as<std::string>());
  for (const auto& a : w["command"]) s.command.push_back(a.as<std::string>());
  s.launch = w["launch"].as<std::string>();
  s.probe = w["probe"].as<bool>();
  s.report_timeout_s = w["report_timeout_s"].as<double>();
  for (const auto& d : r["detectors"]) s.detectors.push_back(d.as<std::string>());
  s.recovery = r["recovery"].as<std::string>();
  for (const auto& p : w["plugins"]) s.plugins.push_back(p.as<std::string>());
  s.jit = w["jit"].as<bool>();
  const YAML::Node doc_fetch = static_cast<const YAML::Node&>(doc)["workload"]
                                   ? static_cast<const YAML::Node&>(doc)["workload"]["fetch"]
                                   : YAML::Node();
  for (size_t i = 0; i < w["fetch"].size(); ++i) {
    const std::string name = w["fetch"][i].as<std::string>();
    if (name != "tokenizer.json") {
      // The document's own node carries the line and column.
      const YAML::Node at = doc_fetch && doc_fetch.IsSequence() && i < doc_fetch.size()
                                ? doc_fetch[i]
                                : w["fetch"][i];
      ErrorCollector::check([&] {
        fail_at(path, at, "workload.fetch",
                fmt::format("unknown artifact '{}' (the hub serves: tokenizer.json)", name));
      });
    }
    s.fetch.push_back(name);
  }

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
      if (auto fault = faults::parse_fault(
              {path, at, s, launcher_has_rank_processes, rank_process_launchers}, f)) {
        if (fault->kind == "port_squat") squats.emplace_back(at, f["port_squat"]);
        s.oop_faults.push_back(std::move(fault));
      }
    });
  }
  // What the run cannot do with its ranks in network namespaces (a network fault or
  // topology.network: namespaces put them there): known now, not when the run reaches it.
  if (s.network == "namespaces") {
    if (!s.fetch.empty()) {
      ErrorCollector::check([&] {
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
