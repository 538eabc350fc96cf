// Reading a campaign SPEC: strict keys, weighted lists, ranges, and the checks that make a mix
// impossible (a fault whose site no layout of the family has, weights that sum to 0), each an
// error at the spec's file:line:col before anything is generated or run.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/campaign/campaign.hpp"
#include "harness/faults/fault.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/scenario/loader.hpp"
#include "injector/plan.hpp"

namespace fl::harness::campaign {

using loader::fail_at;

namespace {

struct Ctx {
  const std::string& file;
};

// Unknown keys of a map are errors naming what is allowed.
void check_keys(const Ctx& c, const YAML::Node& n, const std::string& path,
                const std::vector<std::string>& allowed, const std::string& hint = "") {
  if (!n.IsMap()) fail_at(c.file, n, path, "expected a map");
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
    const std::string at = path.empty() ? k : path + "." + k;
    fail_at(c.file, it->first, at,
            fmt::format("unknown key{} (allowed here: {})", hint, fmt::join(allowed, ", ")));
  }
}

double weight_of(const Ctx& c, const YAML::Node& n, const std::string& path) {
  double w = 0;
  try {
    w = n.as<double>();
  } catch (const YAML::Exception&) {
    fail_at(c.file, n, path, fmt::format("'{}' is not a weight (a number >= 0)", n.Scalar()));
  }
  if (!(w >= 0) || w > 1e9) {
    fail_at(c.file, n, path, fmt::format("{} is not a weight (allowed: 0-1000000000)", w));
  }
  return w;
}

template <class T>
void check_weight_sum(const Ctx& c, const YAML::Node& n, const std::string& path,
                      const std::vector<Weighted<T>>& v) {
  if (v.empty()) fail_at(c.file, n, path, "an empty list (give at least one value)");
  double sum = 0;
  for (auto& w : v) sum += w.weight;
  if (sum <= 0) fail_at(c.file, n, path, "the weights sum to 0 (nothing can be drawn)");
}

// `[a, b]` (each weight 1) or `{a: 3, b: 1}` (value: weight).
template <class T>
std::vector<Weighted<T>> weighted_list(const Ctx& c, const YAML::Node& n, const std::string& path) {
  std::vector<Weighted<T>> out;
  auto value = [&](const YAML::Node& v, const std::string& at) {
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail_at(c.file, v, at, fmt::format("'{}' is not a value of this list's type", v.Scalar()));
    }
  };
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      const auto at = fmt::format("{}[{}]", path, i);
      if (!n[i].IsScalar()) fail_at(c.file, n[i], at, "expected a value");
      out.push_back({value(n[i], at), 1.0, n[i]});
    }
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const auto at = fmt::format("{}.{}", path, it->first.Scalar());
      out.push_back({value(it->first, at), weight_of(c, it->second, at), it->first});
    }
  } else {
    fail_at(c.file, n, path, "expected a list of values or a map of value: weight");
  }
  check_weight_sum(c, n, path, out);
  return out;
}

int64_t int_in(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) {
  int64_t v = 0;
  try {
    v = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    fail_at(c.file, n, path, fmt::format("'{}' is not an integer", n.Scalar()));
  }
  if (v < lo || v > hi) {
    fail_at(c.file, n, path, fmt::format("{} is out of range (allowed {}-{})", v, lo, hi));
  }
  return v;
}

IntRange range_of(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t lo,
                  int64_t hi) {
  check_keys(c, n, path, {"min", "max"});
  IntRange r{lo, hi};
  if (n["min"]) r.min = int_in(c, n["min"], path + ".min", lo, hi);
  if (n["max"]) r.max = int_in(c, n["max"], path + ".max", lo, hi);
  if (r.min > r.max) {
    fail_at(c.file, n, path, fmt::format("min {} is above max {}", r.min, r.max));
  }
  return r;
}

std::vector<Weighted<Layout>> layouts_of(const Ctx& c, const YAML::Node& n,
                                         const std::string& path) {
  if (!n.IsSequence()) fail_at(c.file, n, path, "expected a list of layouts");
  std::vector<Weighted<Layout>> out;
  for (size_t i = 0; i < n.size(); ++i) {
    const auto at = fmt::format("{}[{}]", path, i);
    const YAML::Node& m = n[i];
    check_keys(c, m, at, {"ranks", "nodes", "dp", "tp", "pp", "zero", "weight"});
    Layout l;
    auto get = [&](const char* k, int lo, int hi, int def) {
      return m[k] ? static_cast<int>(int_in(c, m[k], at + "." + k, lo, hi)) : def;
    };
    l.tp = get("tp", 1, 64, 1);
    l.pp = get("pp", 1, 64, 1);
    l.ranks = get("ranks", 1, 256, 0);
    l.dp = get("dp", 1, 256, l.ranks > 0 ? std::max(1, l.ranks / (l.tp * l.pp)) : 1);
    if (l.ranks == 0) l.ranks = l.dp * l.tp * l.pp;
    l.nodes = get("nodes", 1, 64, 1);
    l.zero = get("zero", 0, 3, 0);
    if (l.dp * l.tp * l.pp != l.ranks) {
      fail_at(c.file, m, at,
              fmt::format("dp {} x tp {} x pp {} = {} but ranks is {} (they must be equal)", l.dp,
                          l.tp, l.pp, l.dp * l.tp * l.pp, l.ranks));
    }
    const double w = m["weight"] ? weight_of(c, m["weight"], at + ".weight") : 1.0;
    out.push_back({l, w, m});
  }
  check_weight_sum(c, n, path, out);
  return out;
}

// The kind of a scenario fault item: plan, or the fault kind whose key it has.
std::string kind_of(const Ctx& c, const YAML::Node& item, const std::string& path) {
  if (!item.IsMap()) fail_at(c.file, item, path, "expected a fault item (a map, as in faults:)");
  if (item["plan"]) return "plan";
  std::vector<std::string> kinds{"plan"};
  for (const auto* k : faults::fault_kinds()) {
    kinds.push_back(k->key());
    if (item[k->key()] && k->key() != "restart") return k->key();
  }
  if (item["restart"]) return "restart";
  fail_at(c.file, item, path,
          fmt::format("no fault kind in the item (allowed: {})", fmt::join(kinds, ", ")));
}

// The placeholders a template may use, with sample values (for checking a plan's grammar).
std::string with_samples(std::string s) {
  static const std::vector<std::pair<std::string, std::string>> samples = {
      {"{rank}", "0"}, {"{other_rank}", "1"}, {"{step}", "1"},  {"{seq}", "0"},
      {"{node}", "0"}, {"{other_node}", "1"}, {"{steps}", "8"}, {"{ranks}", "2"}};
  for (auto& [k, v] : samples) {
    for (size_t p; (p = s.find(k)) != std::string::npos;) s.replace(p, k.size(), v);
  }
  return s;
}

FaultTemplate template_of(const Ctx& c, const YAML::Node& n, const std::string& path, bool decoy) {
  check_keys(c, n, path,
             decoy ? std::vector<std::string>{"name", "weight", "fault", "workload"}
                   : std::vector<std::string>{"name", "weight", "fault", "expect"});
  FaultTemplate t;
  t.node = n;
  if (!n["name"]) fail_at(c.file, n, path + ".name", "missing (every entry has a name)");
  t.name = n["name"].as<std::string>();
  if (n["weight"]) t.weight = weight_of(c, n["weight"], path + ".weight");
  if (n["fault"]) {
    t.fault = n["fault"];
    t.kind = kind_of(c, t.fault, path + ".fault");
  }
  if (t.kind == "plan") {
    try {
      for (const auto& e :
           fault::parse_plan(with_samples(t.fault["plan"].as<std::string>()), "plan").entries) {
        t.sites.push_back(e.site);
      }
    } catch (const std::exception& e) {
      fail_at(c.file, t.fault["plan"], path + ".fault.plan", e.what());
    }
  }
  if (decoy) {
    if (n["workload"]) t.workload = n["workload"];
    if (!t.fault.IsMap() && !t.workload.IsMap()) {
      fail_at(c.file, n, path, "a decoy needs a fault or workload overrides (or both)");
    }
  } else {
    if (!t.fault.IsMap()) fail_at(c.file, n, path + ".fault", "missing (the fault item to inject)");
    if (!n["expect"] || !n["expect"].IsMap()) {
      fail_at(c.file, n, path + ".expect",
              "missing (a map of expect keys: what this fault shows on its own)");
    }
    t.expect = n["expect"];
  }
  return t;
}

std::vector<FaultTemplate> templates_of(const Ctx& c, const YAML::Node& n, const std::string& path,
                                        bool decoy) {
  if (!n.IsSequence() || n.size() == 0) {
    fail_at(c.file, n, path, "expected a list of entries (name, weight, fault, ...)");
  }
  std::vector<FaultTemplate> out;
  std::set<std::string> names;
  double sum = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const auto at = fmt::format("{}[{}]", path, i);
    out.push_back(template_of(c, n[i], at, decoy));
    if (!names.insert(out.back().name).second) {
      fail_at(c.file, n[i]["name"], at + ".name",
              fmt::format("'{}' is named twice in {}", out.back().name, path));
    }
    sum += out.back().weight;
  }
  if (sum <= 0) fail_at(c.file, n, path, "the weights sum to 0 (nothing can be drawn)");
  return out;
}

}  // namespace

std::string site_missing(const std::string& site, const Layout& l, const std::string& precision,
                         int64_t checkpoint_every) {
  auto starts = [&](const char* p) { return site.rfind(p, 0) == 0; };
  if (starts("comm.send") || starts("comm.recv") || site == "embedding.grads_all_reduce") {
    return l.pp > 1 ? "" : "it needs pp > 1";
  }
  if (starts("comm.") && l.ranks < 2) return "it needs 2 ranks or more";
  if (site == "comm.reduce_scatter" && l.zero < 2) return "it needs zero 2 or 3";
  if (site == "comm.all_to_all") return "it needs MoE experts (not in a campaign's family)";
  if (starts("infer.")) return "it needs an inference workload (not in a campaign's family)";
  if (site == "loss_scale.update" && precision != "fp16") return "it needs precision fp16";
  if ((site == "checkpoint.write" || site == "checkpoint.save") && checkpoint_every <= 0) {
    return "it needs workload.checkpoint_every > 0";
  }
  if (site == "checkpoint.read" || site == "checkpoint.load" || site == "plugin.load") {
    return "it needs a resume or a plugin (not in a campaign's family)";
  }
  return "";
}

namespace {

// Where a kind or site is missing from every member of the family: the first reason.
std::string missing_everywhere(const Spec& s, const FaultTemplate& t) {
  std::string why;
  for (auto& l : s.layouts) {
    for (auto& p : s.precisions) {
      for (auto& ck : s.checkpoint_every) {
        bool ok = !(t.kind == "network" && l.value.nodes < 2);
        if (t.kind == "network" && !ok && why.empty()) why = "a network fault needs nodes > 1";
        for (auto& site : t.sites) {
          const auto w = site_missing(site, l.value, p.value, ck.value);
          if (!w.empty()) {
            ok = false;
            if (why.empty()) why = fmt::format("site '{}': {}", site, w);
          }
        }
        if (ok) return "";
      }
    }
  }
  return why;
}

void check_family(const Ctx& c, const Spec& s) {
  for (size_t i = 0; i < s.mix.size(); ++i) {
    const auto why = missing_everywhere(s, s.mix[i]);
    if (why.empty()) continue;
    const auto& t = s.mix[i];
    fail_at(c.file, t.fault["plan"] ? t.fault["plan"] : t.fault,
            fmt::format("faults.mix[{}].fault", i),
            fmt::format("'{}' has no site in any layout of workload.layouts: {}", t.name, why));
  }
  for (size_t i = 0; i < s.decoys.size(); ++i) {
    const auto why = missing_everywhere(s, s.decoys[i]);
    if (!why.empty()) {
      fail_at(c.file, s.decoys[i].node, fmt::format("clean.decoys[{}]", i),
              fmt::format("'{}' has no site in any layout of workload.layouts: {}",
                          s.decoys[i].name, why));
    }
  }
}

void parse_workload(const Ctx& c, const YAML::Node& w, Spec& s) {
  check_keys(c, w, "workload", {"layouts", "precisions", "models", "steps", "checkpoint_every"});
  if (!w["layouts"]) fail_at(c.file, w, "workload.layouts", "missing (a list of layouts)");
  s.layouts = layouts_of(c, w["layouts"], "workload.layouts");
  auto list_or = [&](const char* k, const char* def) { return w[k] ? w[k] : YAML::Load(def); };
  s.precisions =
      weighted_list<std::string>(c, list_or("precisions", "[fp32]"), "workload.precisions");
  for (size_t i = 0; i < s.precisions.size(); ++i) {
    const auto& p = s.precisions[i].value;
    if (p != "fp32" && p != "fp16" && p != "bf16") {
      fail_at(c.file, s.precisions[i].node, "workload.precisions",
              fmt::format("'{}' is not a precision (allowed: fp32, fp16, bf16)", p));
    }
  }
  s.models = weighted_list<std::string>(c, list_or("models", "[tiny]"), "workload.models");
  for (auto& m : s.models) {
    if (m.value != "tiny" && m.value != "small") {
      fail_at(c.file, m.node, "workload.models",
              fmt::format("'{}' is not a model (allowed: tiny, small)", m.value));
    }
  }
  s.steps = weighted_list<int64_t>(c, list_or("steps", "[8]"), "workload.steps");
  s.checkpoint_every =
      weighted_list<int64_t>(c, list_or("checkpoint_every", "[0]"), "workload.checkpoint_every");
  for (auto& st : s.steps) {
    if (st.value < 2 || st.value > 100000) {
      fail_at(c.file, st.node, "workload.steps",
              fmt::format("{} is out of range (allowed 2-100000)", st.value));
    }
  }
}

void parse_faults(const Ctx& c, const YAML::Node& f, Spec& s) {
  check_keys(c, f, "faults", {"count", "mix"});
  s.count = weighted_list<int64_t>(c, f["count"] ? f["count"] : YAML::Load("[1]"), "faults.count");
  for (auto& k : s.count) {
    if (k.value < 0 || k.value > 16) {
      fail_at(c.file, k.node, "faults.count",
              fmt::format("{} faults per run is out of range (allowed 0-16)", k.value));
    }
  }
  if (!f["mix"]) fail_at(c.file, f, "faults.mix", "missing (the faults to draw from)");
  s.mix = templates_of(c, f["mix"], "faults.mix", false);
}

void parse_where(const Ctx& c, const YAML::Node& w, Spec& s) {
  check_keys(c, w, "where", {"rank"});
  if (!w["rank"] || (w["rank"].IsScalar() && w["rank"].Scalar() == "uniform")) return;
  if (!w["rank"].IsSequence()) {
    fail_at(c.file, w["rank"], "where.rank", "expected uniform or a list of weights by rank");
  }
  double sum = 0;
  for (size_t i = 0; i < w["rank"].size(); ++i) {
    s.rank_weights.push_back(weight_of(c, w["rank"][i], fmt::format("where.rank[{}]", i)));
    sum += s.rank_weights.back();
  }
  if (sum <= 0) fail_at(c.file, w["rank"], "where.rank", "the weights sum to 0");
}

void parse_cascades(const Ctx& c, const YAML::Node& n, Spec& s) {
  if (!n.IsSequence()) fail_at(c.file, n, "cascades", "expected a list");
  for (size_t i = 0; i < n.size(); ++i) {
    const auto at = fmt::format("cascades[{}]", i);
    check_keys(c, n[i], at, {"from", "to", "probability", "lag", "rank"});
    Cascade k;
    k.node = n[i];
    for (const char* key : {"from", "to"}) {
      const auto& v = n[i][key];
      if (!v) fail_at(c.file, n[i], at + "." + key, "missing (a faults.mix name)");
      const auto name = v.as<std::string>();
      const bool known =
          std::any_of(s.mix.begin(), s.mix.end(), [&](auto& t) { return t.name == name; });
      if (!known) {
        std::vector<std::string> names;
        for (auto& t : s.mix) names.push_back(t.name);
        fail_at(
            c.file, v, at + "." + key,
            fmt::format("'{}' is not in faults.mix (allowed: {})", name, fmt::join(names, ", ")));
      }
      (std::string(key) == "from" ? k.from : k.to) = name;
    }
    if (n[i]["probability"]) {
      k.probability = n[i]["probability"].as<double>();
      if (!(k.probability >= 0 && k.probability <= 1)) {
        fail_at(c.file, n[i]["probability"], at + ".probability",
                fmt::format("{} is out of range (allowed 0-1)", k.probability));
      }
    }
    k.lag = n[i]["lag"] ? range_of(c, n[i]["lag"], at + ".lag", 0, 1000000) : IntRange{1, 1};
    if (n[i]["rank"]) k.rank = n[i]["rank"].as<std::string>();
    if (k.rank != "same" && k.rank != "other") {
      fail_at(c.file, n[i]["rank"], at + ".rank",
              fmt::format("'{}' is not allowed (allowed: same, other)", k.rank));
    }
    s.cascades.push_back(k);
  }
}

void parse_clean(const Ctx& c, const YAML::Node& n, Spec& s) {
  check_keys(c, n, "clean", {"share", "decoys"});
  if (n["share"]) {
    s.clean_share = n["share"].as<double>();
    if (!(s.clean_share >= 0 && s.clean_share <= 1)) {
      fail_at(c.file, n["share"], "clean.share",
              fmt::format("{} is out of range (allowed 0-1)", s.clean_share));
    }
  }
  if (n["decoys"]) s.decoys = templates_of(c, n["decoys"], "clean.decoys", true);
}

void parse_sections(const Ctx& c, const YAML::Node& doc, Spec& s) {
  if (!doc["workload"]) fail_at(c.file, doc, "workload", "missing (the workload family)");
  parse_workload(c, doc["workload"], s);
  if (!doc["faults"]) fail_at(c.file, doc, "faults", "missing (the fault mix)");
  parse_faults(c, doc["faults"], s);
  if (doc["when"]) {
    check_keys(c, doc["when"], "when", {"step", "seq"},
               " (faults fire at a step, a collective seq or a hit count; the fault model has no "
               "wall-clock trigger)");
    if (doc["when"]["step"]) s.step = range_of(c, doc["when"]["step"], "when.step", 0, 1000000);
    if (doc["when"]["seq"]) s.seq = range_of(c, doc["when"]["seq"], "when.seq", 0, 1000000);
  }
  if (doc["where"]) parse_where(c, doc["where"], s);
  if (doc["cascades"]) parse_cascades(c, doc["cascades"], s);
  if (doc["clean"]) parse_clean(c, doc["clean"], s);
  if (doc["scenario"]) {
    check_keys(c, doc["scenario"], "scenario",
               {"timeouts", "env", "detectors", "recovery", "rank_env"});
    s.scenario = doc["scenario"];
  }
  if (s.clean_share > 0 && s.decoys.empty()) {
    fail_at(c.file, doc["clean"], "clean.decoys",
            "missing: clean.share > 0 needs decoys (slow checkpoint, eval pause, loader hiccup)");
  }
}

}  // namespace

Spec load_spec(const std::string& path) {
  const YAML::Node doc = loader::read_scenario_file(path);
  loader::check_duplicate_keys(path, doc, "");
  const Ctx c{path};
  if (!doc.IsMap()) fail_at(path, doc, "", "not a campaign spec (expected a map)");
  check_keys(c, doc, "",
             {"name", "description", "workload", "faults", "when", "where", "cascades", "clean",
              "scenario"});
  Spec s;
  s.file = path;
  if (!doc["name"]) fail_at(path, doc, "name", "missing (names the campaign and its runs)");
  s.name = doc["name"].as<std::string>();
  try {  // it names the campaign's directory and every run's file
    check_path_component("name", s.name);
  } catch (const ConfigError& e) {
    fail_at(path, doc["name"], "name", e.what());
  }
  parse_sections(c, doc, s);
  check_family(c, s);
  return s;
}

}  // namespace fl::harness::campaign
