// The `workload:` section: the few values the harness reads itself, typed (WorkloadSpec), and
// every key a worker declares as resolved, which the harness forwards to it as flags
// (worker_options.hpp). Checks across workload keys report at the key's file:line:col.
#include <fmt/format.h>

#include "harness/model/worker_options.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness {

namespace loader {

namespace {

// The node at a dotted key path under the resolved document ("workload.zero.init").
// (yaml-cpp's Node::operator= writes through: each step rebinds with reset().)
YAML::Node at_path(const YAML::Node& root, const std::string& key) {
  YAML::Node n;
  n.reset(root);
  for (size_t at = 0; at <= key.size() && n;) {
    size_t end = key.find('.', at);
    if (end == std::string::npos) end = key.size();
    const YAML::Node& here = n;
    const YAML::Node next = here[key.substr(at, end - at)];
    n.reset(next);
    at = end + 1;
  }
  return n ? YAML::Clone(n) : YAML::Node();
}

// Where the document says `workload.KEY` (its marks give the line and column), else `fallback`.
YAML::Node doc_key(const YAML::Node& doc, const char* key, const YAML::Node& fallback) {
  const YAML::Node w = doc["workload"];
  return w && w.IsMap() && w[key] ? w[key] : fallback;
}

void check_optimizer(const std::string& path, const YAML::Node& doc, const WorkloadSpec& w) {
  const auto momentum = w.get<double>("workload.momentum");
  const auto optimizer = w.get<std::string>("workload.optimizer");
  ErrorCollector::check([&] {
    if (momentum != 0 && optimizer == "adamw") {
      fail_at(path, doc_key(doc, "momentum", doc), "workload.momentum",
              fmt::format("momentum {} applies to optimizer: sgd or muon only (this workload uses "
                          "{}; allowed: 0, or optimizer: sgd or muon)",
                          momentum, optimizer));
    }
  });
  const auto scale = w.get<double>("workload.loss_scale");
  const auto min_scale = w.get<double>("workload.min_loss_scale");
  ErrorCollector::check([&] {
    if (min_scale > scale) {
      fail_at(
          path, doc_key(doc, "min_loss_scale", doc), "workload.min_loss_scale",
          fmt::format("{} is above loss_scale {} (allowed: at most loss_scale)", min_scale, scale));
    }
  });
}

void parse_fetch(const std::string& path, const YAML::Node& doc, const YAML::Node& w,
                 WorkloadSpec& out) {
  const YAML::Node doc_fetch = doc["workload"] ? doc["workload"]["fetch"] : YAML::Node();
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
    out.fetch.push_back(name);
  }
}

}  // namespace

void parse_workload(const std::string& path, const YAML::Node& doc, const YAML::Node& r,
                    Scenario& s) {
  const YAML::Node w = r["workload"];
  WorkloadSpec& out = s.workload;
  for (const auto& o : worker_options()) {
    if (o.type != "section") out.options[o.key] = at_path(r, o.key);
  }
  // workload.data.seed 0: the scenario's seed.
  auto& data_seed = out.options["workload.data.seed"];
  if (data_seed && data_seed.as<int64_t>() == 0) data_seed.reset(YAML::Node(s.seed));
  // workload.infer.seed 0: the scenario's seed too (infer_args passes it as --seed;
  // check_infer_context refuses another value).
  auto& infer_seed = out.options["workload.infer.seed"];
  if (infer_seed && infer_seed.as<int64_t>() == 0) infer_seed.reset(YAML::Node(s.seed));
  out.kind = w["kind"].as<std::string>();
  out.model = w["model"].as<std::string>();
  out.device = w["device"].as<std::string>();
  out.fidelity = w["fidelity"].as<std::string>();
  out.steps = w["steps"].as<int64_t>();
  out.precision = w["precision"].as<std::string>();
  out.prompt_len = w["infer"]["prompt_len"].as<int64_t>();
  out.new_tokens = w["infer"]["new_tokens"].as<int64_t>();
  out.seq_len = w["shape"]["seq_len"].as<int64_t>();
  out.checkpoint_every = w["checkpoint"]["every"].as<int64_t>();
  out.resume = w["checkpoint"]["resume"].as<bool>();
  out.auto_resume = w["checkpoint"]["auto_resume"].as<bool>();
  for (const auto& a : w["args"]) {
    out.extra_args.push_back(a.as<std::string>());
    if (out.extra_args.back() == "--check-layout") {  // stop 63: the harness's own question
      const YAML::Node at =
          doc["workload"] && doc["workload"]["args"] ? doc["workload"]["args"] : doc;
      fail_at(path, at, fmt::format("workload.args[{}]", out.extra_args.size() - 1),
              "--check-layout is the harness's question to the worker before a run (validate "
              "asks it); a rank given it only checks its layout and exits");
    }
  }
  for (const auto& a : w["command"]) out.command.push_back(a.as<std::string>());
  out.launch = w["launch"].as<std::string>();
  out.probe = w["probe"].as<bool>();
  out.report_timeout_s = w["report_timeout_s"].as<double>();
  for (const auto& p : w["plugins"]) out.plugins.push_back(p.as<std::string>());
  out.jit = w["jit"].as<bool>();
  check_optimizer(path, doc, out);
  parse_fetch(path, doc, w, out);
  ErrorCollector::check([&] { check_infer_context(path, doc, s); });
}

}  // namespace loader

}  // namespace fl::harness
