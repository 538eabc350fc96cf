#include "harness/triage/draft.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "base/utf8.hpp"
#include "harness/triage/draft_base.hpp"

namespace fl::triage {

namespace {

std::string str(const YAML::Node& n, const char* key) {
  return n && n[key] && n[key].IsScalar() ? n[key].as<std::string>() : "";
}

}  // namespace

bool Draft::cause_expressed() const {
  return std::none_of(unexpressed.begin(), unexpressed.end(),
                      [](const Unexpressed& u) { return u.kind == "cause"; });
}

namespace {

// One value the draft sets: a key path under a section ("zero.offload_optimizer" under
// "workload"), and the comment lines above its first component.
struct Change {
  std::string section, key;
  YAML::Node value;
  std::vector<std::string> comments;
};
// Changes that stand or fall together (a layout: ranks with its dp).
struct Adaptation {
  std::string what;
  std::vector<Change> changes;
};

struct Facts {
  std::map<std::string, const EnvFact*> by_key;
  const EnvFact* get(const std::string& k) const {
    const auto it = by_key.find(k);
    return it == by_key.end() ? nullptr : it->second;
  }
};

std::string from(const EnvFact& f) {
  // Valid UTF-8, cut between characters: the loader refuses a file that is not UTF-8 text.
  std::string text = valid_utf8(f.text);
  const auto b = text.find_first_not_of(" \t");
  text = b == std::string::npos ? "" : text.substr(b);
  if (text.size() > 100) text = std::string(utf8_prefix(text, 97)) + "...";
  std::replace(text.begin(), text.end(), '`', '\'');
  return fmt::format("from line {}: `{}`", f.line, text);
}

int number(const EnvFact* f) {
  if (f == nullptr || f->value.empty() || !std::isdigit(static_cast<unsigned char>(f->value[0])))
    return 0;
  // A count from a log: digits only, and no world is larger than this.
  return static_cast<int>(std::min(std::strtol(f->value.c_str(), nullptr, 10), 1L << 20));
}

int topo_int(const YAML::Node& doc, const char* key, int dflt) {
  const YAML::Node t = doc["topology"];
  try {
    return t && t[key] ? t[key].as<int>() : dflt;
  } catch (const YAML::Exception&) {
    return dflt;  // the loader names it when the draft is validated
  }
}

// World size: stated, or nodes x GPUs per node (or those made visible, or listed), or the GPUs a
// report states ("using 4 V100") unless it names more nodes (per node or in all?).
int world_size(const Facts& f, std::vector<std::string>* why) {
  const auto *w = f.get("world_size"), *all = f.get("gpus"), *g = f.get("gpus_per_node");
  for (const char* key : {"gpus_visible", "gpus_listed"})  // when no count is stated
    if (number(g) <= 0 && number(all) <= 0) g = f.get(key);
  const auto* n = f.get("nodes");
  if (number(w) <= 0 && number(g) <= 0 && (number(all) <= 0 || number(n) > 1)) return 0;
  const auto* one = number(w) > 0 ? w : number(g) > 0 ? g : all;
  why->push_back(from(*one));
  if (one != g || number(n) <= 1) return number(one);
  why->push_back(from(*n));
  return number(g) * number(n);
}

void add_layout(const YAML::Node& doc, const Facts& f, const DraftOptions& o,
                std::vector<Adaptation>& out, std::vector<Unexpressed>& unexpressed) {
  std::vector<std::string> why;
  const int world = world_size(f, &why);
  const int base_ranks = topo_int(doc, "ranks", 1);
  int tp = topo_int(doc, "tp", 1), pp = topo_int(doc, "pp", 1);
  Adaptation a{"layout", {}};
  int ranks = base_ranks;
  if (world > 0) {
    ranks = std::clamp(world, base_ranks, std::max(base_ranks, o.max_ranks));
    if (world > ranks) {
      why.push_back(
          fmt::format("world size {} clamped to {}: this machine runs at most {} CPU ranks", world,
                      ranks, ranks));
      unexpressed.push_back({"setting", fmt::format("world size {} ({}): the draft runs {} ranks, "
                                                    "the most this machine runs",
                                                    world, why.front(), ranks)});
    } else if (world < ranks) {
      why.push_back(
          fmt::format("world size {} raised to {}: the scenario's mechanism needs {} ranks", world,
                      ranks, ranks));
    }
    a.changes.push_back({"topology", "ranks", YAML::Node(ranks), why});
  }
  const auto* tpf = f.get("tp") ? f.get("tp") : f.get("mp_size");
  if (number(tpf) > 0 && ranks % (number(tpf) * pp) == 0) {
    tp = number(tpf);
    a.changes.push_back({"topology", "tp", YAML::Node(tp), {from(*tpf)}});
  }
  if (const auto* ppf = f.get("pp"); number(ppf) > 0 && ranks % (tp * number(ppf)) == 0) {
    pp = number(ppf);
    a.changes.push_back({"topology", "pp", YAML::Node(pp), {from(*ppf)}});
  }
  if (!a.changes.empty() && doc["topology"] && doc["topology"]["dp"]) {
    a.changes.push_back({"topology",
                         "dp",
                         YAML::Node(ranks / (tp * pp)),
                         {fmt::format("ranks / (tp x pp) = {} / ({} x {})", ranks, tp, pp)}});
  }
  if (!a.changes.empty()) out.push_back(std::move(a));
  if (const auto* n = f.get("nodes"); number(n) > 1 && ranks % number(n) == 0) {
    out.push_back({"nodes", {{"topology", "nodes", YAML::Node(number(n)), {from(*n)}}}});
  }
}

void add_zero_and_precision(const Facts& f, std::vector<Adaptation>& out,
                            std::vector<Unexpressed>& unexpressed) {
  const auto* z = f.get("zero_stage");
  if (z && std::isdigit(static_cast<unsigned char>(z->value[0])) && number(z) <= 3) {
    out.push_back({"zero", {{"topology", "zero", YAML::Node(number(z)), {from(*z)}}}});
  }
  if (const auto* off = f.get("offload")) {
    if (off->value == "cpu" && z && number(z) >= 1) {
      out.push_back(
          {"offload", {{"workload", "zero.offload_optimizer", YAML::Node(true), {from(*off)}}}});
    } else if (off->value != "cpu") {
      unexpressed.push_back(
          {"setting", fmt::format("offload to {} ({}): faultline offloads the optimizer to host "
                                  "memory only (workload.zero.offload_optimizer)",
                                  off->value, from(*off))});
    }
  }
  if (const auto* p = f.get("precision")) {
    // The value as the line wrote it ("FP16", "BF16", torch's "float16"), lower-cased.
    static const std::map<std::string, std::string> kPrecision = {
        {"fp16", "fp16"},     {"half", "fp16"},    {"float16", "fp16"}, {"bf16", "bf16"},
        {"bfloat16", "bf16"}, {"float32", "fp32"}, {"fp32", "fp32"}};
    const auto it = kPrecision.find(ascii_lower(p->value));
    if (it != kPrecision.end()) {
      out.push_back({"precision", {{"workload", "precision", YAML::Node(it->second), {from(*p)}}}});
    } else {
      unexpressed.push_back({"setting", fmt::format("precision {} ({}): workload.precision has "
                                                    "fp32, fp16 and bf16 only",
                                                    p->value, from(*p))});
    }
  }
}

void add_launcher(const YAML::Node& doc, const Facts& f, std::vector<Adaptation>& out,
                  std::vector<Unexpressed>& unexpressed) {
  const auto* l = f.get("launcher");
  if (l == nullptr) return;
  std::string base = str(doc["topology"], "launcher");
  if (base.empty()) base = "auto";
  const bool replaceable = base == "auto" || base == "local" || base == "mpirun";
  std::string to;
  if (l->value == "deepspeed") to = "deepspeed";
  if (l->value == "mpirun" || l->value == "mpiexec") to = "mpirun";
  if (!to.empty() && to == base) {  // the base's own launcher: its section stays as it is
    out.push_back({"launcher", {{"topology", "launcher", YAML::Node(to), {from(*l)}}}});
    return;
  }
  if (to.empty() || !replaceable) {
    const std::string reason =
        !replaceable ? fmt::format("the scenario's mechanism is its launcher {}", base)
        : l->value == "srun"
            ? "srun needs a Slurm allocation (docs/cluster.md); inside one, --set "
              "topology.launcher=srun"
            : fmt::format(
                  "faultline has no {} launcher (it has local, mpirun, srun, deepspeed, "
                  "command)",
                  l->value);
    unexpressed.push_back({"setting", fmt::format("launcher {} ({}): the draft keeps launcher {}; "
                                                  "{}",
                                                  l->value, from(*l), base, reason)});
    return;
  }
  Adaptation a{"launcher", {{"topology", "launcher", YAML::Node(to), {from(*l)}}}};
  if (const auto* v = f.get("deepspeed"); v && to == "deepspeed") {
    YAML::Node ds;
    ds["version"] = v->value;
    a.changes.push_back({"topology", "deepspeed", ds, {from(*v) + " (the runner's version)"}});
  }
  out.push_back(std::move(a));
}

// Root causes that are versions or hardware: faultline's workers are its own programs, so the
// versions read from the input have no knob unless a scenario models that very mismatch.
bool version_cause(const std::string& rc) {
  static const std::set<std::string> kVersion = {"R1.1", "R2.2", "R3.4", "R4.2", "R5.3", "R5.5"};
  return kVersion.count(rc) > 0;
}

void add_cause_gap(const Result& r, const ScenarioSource& base, const Tables& t, const Facts& f,
                   const std::vector<ScenarioSource>& sources, std::vector<Unexpressed>& out) {
  if (r.root_causes.empty() || r.root_causes.front().id == base.root_cause) return;
  const std::string& rc = r.root_causes.front().id;
  std::set<std::string> elsewhere;
  std::vector<std::string> here;  // bases of this cause for the draft's symptom, not chosen
  for (const auto& s : sources) {
    if (s.root_cause != rc) continue;
    elsewhere.insert(s.symptom);
    if (s.symptom == base.symptom) here.push_back(s.shown);
  }
  std::string text = fmt::format("root cause {} ({}): ", rc, t.taxonomy.root_cause_name.at(rc));
  if (!here.empty()) {
    text += fmt::format(
        "faultline builds it for {} in {}, but the draft's base, {}, fit the input "
        "better (its other facts, or a mechanism the input never mentions)",
        base.symptom, fmt::join(here, ", "), base.shown);
  } else {
    text += elsewhere.empty()
                ? "no scenario or fault kind of faultline builds it yet"
                : fmt::format("faultline builds it only for symptom(s) {}, not for {}",
                              fmt::join(elsewhere, ", "), base.symptom);
  }
  text += fmt::format("; the draft reproduces {} through {} (its base's cause) instead",
                      base.symptom, base.root_cause.empty() ? "another cause" : base.root_cause);
  if (version_cause(rc)) {
    std::vector<std::string> versions;
    for (const char* k :
         {"torch", "cuda", "nccl", "driver", "driver_cuda", "deepspeed", "colossalai", "gpu"}) {
      if (const auto* v = f.get(k))
        versions.push_back(fmt::format("{} {} (line {})", k, v->value, v->line));
    }
    if (!versions.empty()) {
      const std::string why = "have no knob: the workers are faultline's own programs on CPU ranks";
      text +=
          fmt::format("; the versions and hardware read ({}) {}", fmt::join(versions, ", "), why);
    }
  }
  out.push_back({"cause", text});
}

std::string block(const std::string& key, const YAML::Node& value, const std::string& indent) {
  YAML::Emitter em;
  em << YAML::BeginMap << YAML::Key << key << YAML::Value << value << YAML::EndMap;
  std::string out;
  std::string text = em.c_str();
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += indent + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

// Symptom ids stay strings for every YAML reader ("4.10" is not the number 4.1).
std::string quote_symptoms(const std::string& text) {
  static const std::regex kId(R"((symptom: )(\d+\.\d+)\b)");
  return std::regex_replace(text, kId, "$1\"$2\"");
}

using Comments = std::map<std::string, std::map<std::string, std::vector<std::string>>>;

std::string emit(const YAML::Node& doc, const std::vector<std::string>& header,
                 const Comments& comments) {
  std::string out;
  for (const auto& h : header) out += "# " + h + "\n";
  for (const auto& kv : doc) {
    const auto key = kv.first.as<std::string>();
    const auto c = comments.find(key);
    if (c == comments.end() || !kv.second.IsMap()) {
      out += block(key, kv.second, "");
      continue;
    }
    out += key + ":\n";
    for (const auto& sub : kv.second) {
      const auto subkey = sub.first.as<std::string>();
      if (const auto lines = c->second.find(subkey); lines != c->second.end()) {
        for (const auto& l : lines->second) out += "  # " + l + "\n";
      }
      out += block(subkey, sub.second, "  ");
    }
  }
  return quote_symptoms(out);
}

void apply(YAML::Node& doc, const Change& ch, Comments& comments) {
  if (!doc[ch.section] || !doc[ch.section].IsMap())
    doc[ch.section] = YAML::Node(YAML::NodeType::Map);
  YAML::Node n = doc[ch.section];
  const auto dot = ch.key.find('.');
  const std::string first = ch.key.substr(0, dot);
  if (dot == std::string::npos) {
    n[first] = ch.value;
  } else {
    if (!n[first] || !n[first].IsMap()) n[first] = YAML::Node(YAML::NodeType::Map);
    n[first][ch.key.substr(dot + 1)] = ch.value;
  }
  auto& lines = comments[ch.section][first];
  lines.insert(lines.end(), ch.comments.begin(), ch.comments.end());
}

// The value at "section.key[.sub]", or a null node (recursive: assigning a Node writes through).
YAML::Node value_at(const YAML::Node& n, const std::string& path) {
  if (!n || !n.IsMap()) return YAML::Node();
  const auto dot = path.find('.');
  const YAML::Node next = n[path.substr(0, dot)];
  if (!next || dot == std::string::npos) return next;
  return value_at(next, path.substr(dot + 1));
}

std::string scalar_or(const YAML::Node& n, const std::string& dflt) {
  return n && n.IsScalar() ? n.Scalar() : dflt;
}

// Why an adaptation would take away what the base's mechanism needs (reference.needs): it
// changes a needed key from the base's value. "" when it keeps them all.
std::string breaks_mechanism(const Adaptation& a, const ScenarioSource& base) {
  for (const auto& ch : a.changes) {
    const std::string path = ch.section + "." + ch.key;
    if (std::find(base.needs.begin(), base.needs.end(), path) == base.needs.end()) continue;
    const YAML::Node was = value_at(base.doc, path);
    const std::string to = scalar_or(ch.value, "");
    if (was && was.IsScalar() && was.Scalar() == to) continue;
    return fmt::format("{}: {} {}: the mechanism of {} needs its {} ({}; its reference.needs)",
                       a.what, path, to, base.shown, path, scalar_or(was, "the default"));
  }
  return "";
}

// The workers' own precondition, which the loader does not check: the offload moves the rank's
// ZeRO partition, so a draft at ZeRO stage 0 cannot have it: neither the offload read beside a
// stage 0 the draft keeps, nor stage 0 read for a base that offloads. "" when it can.
std::string offload_without_zero(const Adaptation& a, const YAML::Node& trial) {
  if (scalar_or(value_at(trial, "topology.zero"), "0") != "0") return "";
  if (a.what == "offload")
    return a.what + ": the optimizer offload needs ZeRO stage 1, 2 or 3; the draft keeps stage 0";
  if (scalar_or(value_at(trial, "workload.zero.offload_optimizer"), "false") != "true") return "";
  return a.what +
         ": topology.zero 0: the base's optimizer offload needs ZeRO stage 1, 2 or 3; the draft "
         "keeps its stage";
}

YAML::Node reference_of(const ScenarioSource& base, const Thread& th, Comments& comments) {
  YAML::Node ref;
  if (!th.id.empty()) {
    ref[th.kind] = th.id;
    ref["url"] = th.url;
    comments["reference"][th.kind] = {
        fmt::format("from line {}: `{}`", th.line, th.url),
        "cite it only once the thread's cause and fix are the ones this draft builds "
        "(docs/scenarios.md#references-a-cited-thread-or-a-mechanism)"};
  } else {
    ref["kind"] = "stands-for";
    ref["mechanism"] = base.mechanism.empty() ? first_sentence(base.description) : base.mechanism;
    comments["reference"]["kind"] = {
        "no issue URL in the input: the draft stands for its base's "
        "mechanism"};
  }
  if (!base.needs.empty()) ref["needs"] = base.needs;
  ref["symptom"] = base.symptom;
  if (!base.root_cause.empty()) ref["root_cause"] = base.root_cause;
  if (!base.fix_pattern.empty()) ref["fix_pattern"] = base.fix_pattern;
  return ref;
}

// The layout read with each of ranks, tp and pp the base's mechanism needs held at the base's
// value, and dp recomputed, when the rest still divides and still changes something: a base that
// needs its tp can take the world size read. Nothing when the layout needs none of them.
std::optional<Adaptation> layout_keeping_needs(const Adaptation& a, const ScenarioSource& base) {
  const auto needed = [&](const std::string& key) {
    return std::find(base.needs.begin(), base.needs.end(), "topology." + key) != base.needs.end();
  };
  if (a.what != "layout" || !(needed("ranks") || needed("tp") || needed("pp"))) return {};
  std::map<std::string, int> v = {{"ranks", topo_int(base.doc, "ranks", 1)},
                                  {"tp", topo_int(base.doc, "tp", 1)},
                                  {"pp", topo_int(base.doc, "pp", 1)}};
  const auto was = v;
  Adaptation kept{"layout", {}};
  std::vector<std::string> held;
  for (const auto& ch : a.changes) {
    if (ch.key != "dp" && needed(ch.key)) held.push_back(ch.key);
    if (ch.key == "dp" || needed(ch.key)) continue;
    kept.changes.push_back(ch);
    v[ch.key] = ch.value.as<int>();
  }
  if (v == was || v["ranks"] % (v["tp"] * v["pp"]) != 0) return {};
  if (base.doc["topology"] && base.doc["topology"]["dp"]) {
    const int dp = v["ranks"] / (v["tp"] * v["pp"]);
    if (needed("dp") && dp != topo_int(base.doc, "dp", 1)) return {};
    kept.changes.push_back(
        {"topology",
         "dp",
         YAML::Node(dp),
         {fmt::format("ranks / (tp x pp) = {} / ({} x {}); {} kept at the base's value "
                      "(its reference.needs)",
                      v["ranks"], v["tp"], v["pp"], fmt::join(held, " and "))}});
  }
  return kept;
}

// Applies one adaptation when the workers' preconditions hold and the draft still validates;
// otherwise the reason goes to d.dropped. Whether it was applied.
bool try_adaptation(const Adaptation& a, const std::vector<std::string>& header,
                    const Validator& validate, YAML::Node& doc, Comments& comments, Draft& d) {
  YAML::Node trial = YAML::Clone(doc);
  Comments trial_comments = comments;
  for (const auto& ch : a.changes) apply(trial, ch, trial_comments);
  if (const auto why = offload_without_zero(a, trial); !why.empty()) {
    d.dropped.push_back(why);
    return false;
  }
  const std::string yaml = emit(trial, header, trial_comments);
  if (const auto err = validate(yaml); !err.empty()) {
    d.dropped.push_back(fmt::format("{}: {}", a.what, err));
    return false;
  }
  doc = trial;
  comments = std::move(trial_comments);
  d.yaml = yaml;
  return true;
}

// Applies each adaptation that keeps the base's mechanism and still validates (d.yaml); the others
// go to d.dropped with the reason. A layout that changes a needed key keeps the rest if it can.
void adapt(const std::vector<Adaptation>& adaptations, const ScenarioSource& base,
           const std::vector<std::string>& header, const Validator& validate, YAML::Node& doc,
           Comments& comments, Draft& d) {
  for (const auto& a : adaptations) {
    if (const auto why = breaks_mechanism(a, base); !why.empty()) {
      d.dropped.push_back(why);
      const auto rest = layout_keeping_needs(a, base);
      const size_t at = d.dropped.size() - 1;
      if (rest && try_adaptation(*rest, header, validate, doc, comments, d)) {
        d.dropped[at] += "; the rest of the layout is kept";
      }
      continue;
    }
    try_adaptation(a, header, validate, doc, comments, d);
  }
}

}  // namespace

Draft draft_scenario(const Result& r, const std::string& text, const Tables& t,
                     const std::vector<ScenarioSource>& sources, const Validator& validate,
                     const DraftOptions& o) {
  Draft d;
  if (r.kind != Result::Kind::kFound || r.symptoms.empty()) {
    d.why = "no symptom to draft from";
    return d;
  }
  Facts f;
  for (const auto& e : r.env) f.by_key.emplace(e.key, &e);
  BaseQuery q;
  if (const auto* z = f.get("zero_stage")) q.zero_stage = number(z);
  if (const auto* l = f.get("launcher")) q.launcher = l->value;
  // Whole words, by a plain scan: an icase std::regex over a 16 MiB log took seconds.
  const std::string low = ascii_lower(text);  // once: a 16 MiB input is not copied per word
  q.moe_input = has_whole_word_lower(low, "moe") || has_whole_word_lower(low, "expert") ||
                has_whole_word_lower(low, "experts") || has_whole_word_lower(low, "mixtral");
  for (const char* fw : {"deepspeed", "megatron"}) {
    if (has_whole_word_lower(low, fw)) q.frameworks.emplace_back(fw);
  }
  const ScenarioSource* base = choose_base(r, sources, q);
  d.symptom = r.symptoms.front().id;
  d.events = evidence_events(r.symptoms.front());
  if (base == nullptr) {
    d.why = fmt::format("no scenario with a fix reproduces symptom {}", d.symptom);
    d.unexpressed.push_back(
        {"cause", fmt::format("symptom {} ({}): no runnable scenario yet", d.symptom,
                              t.taxonomy.symptom_name.at(d.symptom))});
    return d;
  }
  d.base = base->shown;
  d.base_shows_event = std::any_of(d.events.begin(), d.events.end(), [&](const std::string& e) {
    return expect_shows(base->doc["expect"], e);
  });
  d.root_cause = base->root_cause;
  add_cause_gap(r, *base, t, f, sources, d.unexpressed);

  YAML::Node doc = YAML::Clone(base->doc);
  Comments comments;
  doc["name"] = "draft-" + base->name;
  doc["description"] = fmt::format("Drafted by faultline triage from {}, adapted from {}. {}",
                                   o.input_name.empty() ? "an issue's text" : o.input_name,
                                   base->shown, base->description);
  while (doc["description"].as<std::string>().back() == '\n') {
    const auto desc = doc["description"].as<std::string>();
    doc["description"] = desc.substr(0, desc.size() - 1);
  }
  doc["reference"] = reference_of(*base, find_thread(text), comments);
  const auto rc_name = [&](const std::string& id) {
    const auto it = t.taxonomy.root_cause_name.find(id);
    return it == t.taxonomy.root_cause_name.end() ? std::string("-") : it->second;
  };
  std::vector<std::string> header = {
      fmt::format("Drafted by `faultline triage` for symptom {} ({}), root cause {} ({}).",
                  d.symptom, t.taxonomy.symptom_name.at(d.symptom),
                  base->root_cause.empty() ? "-" : base->root_cause, rc_name(base->root_cause)),
      fmt::format("Adapted from {}{}: its fault, expectation and fix variant ({}) are kept;",
                  base->shown, base->cited.empty() ? "" : " (" + base->cited + ")",
                  base->fix_pattern.empty() ? "its fix" : base->fix_pattern),
      "a value under a `from line` comment was read from the input. Check and run it:",
      "faultline validate FILE; faultline repro FILE (the fault, then its fix)."};
  if (const auto* g = f.get("gpu")) {
    header.push_back(
        fmt::format("The issue ran on {} ({}); the draft runs CPU ranks.", g->value, from(*g)));
  }

  std::vector<Adaptation> adaptations;
  add_layout(doc, f, o, adaptations, d.unexpressed);
  add_zero_and_precision(f, adaptations, d.unexpressed);
  add_launcher(doc, f, adaptations, d.unexpressed);
  d.yaml = emit(doc, header, comments);
  if (const auto err = validate(d.yaml); !err.empty()) {
    d.why = "its base scenario does not load here: " + err;
    d.yaml.clear();
    return d;
  }
  adapt(adaptations, *base, header, validate, doc, comments, d);
  d.made = true;
  return d;
}

std::string format_draft(const Draft& d) {
  std::string out;
  if (!d.made) {
    out += fmt::format("Drafted scenario: none ({})\n", d.why);
  } else {
    out += fmt::format("Drafted scenario (adapted from {}; it validates; --write FILE saves it):\n",
                       d.base);
    out += "---\n" + d.yaml + "...\n";
    if (!d.dropped.empty()) {
      out +=
          "Left out of the draft (the scenario does not load with them, or its mechanism "
          "needs the base's value):\n";
      for (const auto& x : d.dropped) out += "  - " + x + "\n";
    }
  }
  if (!d.unexpressed.empty()) {
    out += "Could not express:\n";
    for (const auto& u : d.unexpressed) out += fmt::format("  - {}: {}\n", u.kind, u.text);
  }
  return out;
}

}  // namespace fl::triage
