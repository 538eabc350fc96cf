// Drawing one run of a campaign: its workload from the family, how many faults, which ones,
// where and when, their cascades (or a clean run with a decoy), and the complete scenario file.
// Every draw comes from one SplitMix64 stream keyed by (campaign seed, run index), so run i is
// the same in a campaign of 10 runs and in one of 200, and the same seed writes the same bytes.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/counter_rng.hpp"
#include "harness/campaign/campaign.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::campaign {

Rng::Rng(uint64_t seed, uint64_t stream)
    : state_(rng::mix(rng::mix(seed ^ rng::hash_name("faultline-campaign")) + stream)) {}

uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return rng::mix(state_);
}

double Rng::unit() {
  return rng::to_unit(next());
}

int64_t Rng::between(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(next() % span);
}

size_t Rng::pick(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  double x = unit() * sum;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  for (size_t i = weights.size(); i-- > 0;) {
    if (weights[i] > 0) return i;
  }
  return 0;
}

namespace {

template <class T>
const T& pick_weighted(Rng& r, const std::vector<Weighted<T>>& v) {
  std::vector<double> w;
  for (auto& x : v) w.push_back(x.weight);
  return v[r.pick(w)].value;
}

struct Workload {
  Layout layout;
  std::string precision, model;
  int64_t steps = 0, checkpoint_every = 0;
};

bool available(const FaultTemplate& t, const Workload& w) {
  if (t.kind == "network" && w.layout.nodes < 2) return false;
  return std::all_of(t.sites.begin(), t.sites.end(), [&](const std::string& s) {
    return site_missing(s, w.layout, w.precision, w.checkpoint_every).empty();
  });
}

// Two faults of one run never share a site or an out-of-process kind, so the history tells
// which of them fired.
bool conflicts(const FaultTemplate& t, const std::vector<DrawnFault>& chosen) {
  for (auto& f : chosen) {
    if (t.kind != "plan" && t.kind == f.kind) return true;
    for (auto& s : t.sites) {
      if (std::find(f.sites.begin(), f.sites.end(), s) != f.sites.end()) return true;
    }
  }
  return false;
}

Workload draw_workload(Rng& r, const Spec& s) {
  Workload w;
  w.layout = pick_weighted(r, s.layouts);
  w.precision = pick_weighted(r, s.precisions);
  w.model = pick_weighted(r, s.models);
  w.steps = pick_weighted(r, s.steps);
  w.checkpoint_every = pick_weighted(r, s.checkpoint_every);
  return w;
}

// Replaces the placeholders in every string of `n` (a deep copy).
YAML::Node substitute(const YAML::Node& n, const std::map<std::string, std::string>& values) {
  if (n.IsScalar()) {
    std::string s = n.Scalar();
    for (auto& [k, v] : values) {
      for (size_t p; (p = s.find(k)) != std::string::npos;) s.replace(p, k.size(), v);
    }
    return YAML::Node(s);
  }
  if (n.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    for (const auto& x : n) out.push_back(substitute(x, values));
    return out;
  }
  if (n.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (auto it = n.begin(); it != n.end(); ++it) {
      out[it->first.Scalar()] = substitute(it->second, values);
    }
    return out;
  }
  return YAML::Clone(n);
}

int draw_rank(Rng& r, const Spec& s, int ranks) {
  if (s.rank_weights.empty()) return static_cast<int>(r.between(0, ranks - 1));
  std::vector<double> w(s.rank_weights.begin(),
                        s.rank_weights.begin() + std::min<size_t>(ranks, s.rank_weights.size()));
  w.resize(ranks, 0);
  const bool any = std::any_of(w.begin(), w.end(), [](double x) { return x > 0; });
  return any ? static_cast<int>(r.pick(w)) : static_cast<int>(r.between(0, ranks - 1));
}

int other_than(Rng& r, int x, int n) {
  if (n < 2) return x;
  const int o = static_cast<int>(r.between(0, n - 2));
  return o >= x ? o + 1 : o;
}

DrawnFault instantiate(const FaultTemplate& t, const Workload& w, int rank, int other_rank,
                       int64_t step, int64_t seq, int node, int other_node) {
  DrawnFault f;
  f.templ = t.name;
  f.kind = t.kind;
  f.sites = t.sites;
  f.rank = rank;
  f.other_rank = other_rank;
  f.step = step;
  f.seq = seq;
  f.node = node;
  f.other_node = other_node;
  const std::map<std::string, std::string> values = {
      {"{rank}", std::to_string(rank)},     {"{other_rank}", std::to_string(other_rank)},
      {"{step}", std::to_string(step)},     {"{seq}", std::to_string(seq)},
      {"{node}", std::to_string(node)},     {"{other_node}", std::to_string(other_node)},
      {"{steps}", std::to_string(w.steps)}, {"{ranks}", std::to_string(w.layout.ranks)}};
  if (t.fault.IsMap()) f.item = substitute(t.fault, values);
  if (t.expect.IsMap()) f.expect = substitute(t.expect, values);
  return f;
}

DrawnFault draw_fault(Rng& r, const Spec& s, const FaultTemplate& t, const Workload& w) {
  const int rank = draw_rank(r, s, w.layout.ranks);
  const int other = other_than(r, rank, w.layout.ranks);
  const int64_t last = std::max<int64_t>(0, w.steps - 1);
  const int64_t step = r.between(std::min(s.step.min, last), std::min(s.step.max, last));
  const int64_t seq = r.between(s.seq.min, s.seq.max);
  const int node = static_cast<int>(r.between(0, w.layout.nodes - 1));
  return instantiate(t, w, rank, other, step, seq, node, other_than(r, node, w.layout.nodes));
}

const FaultTemplate* template_named(const Spec& s, const std::string& name) {
  for (auto& t : s.mix) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// The fault `cascades` rules start from drawn fault `i`: same or another rank, a lag later.
void draw_cascades(Rng& r, const Spec& s, const Workload& w, std::vector<DrawnFault>& faults,
                   size_t i) {
  for (auto& c : s.cascades) {
    if (c.from != faults[i].templ) continue;
    const bool fire = r.unit() < c.probability;
    const int64_t lag = r.between(c.lag.min, c.lag.max);
    const FaultTemplate* t = template_named(s, c.to);
    if (!fire || !t || !available(*t, w) || conflicts(*t, faults)) continue;
    const DrawnFault& from = faults[i];
    const int rank = c.rank == "same" ? from.rank : from.other_rank;
    const int other = c.rank == "same" ? from.other_rank : from.rank;
    const int64_t step = std::min(from.step + lag, std::max<int64_t>(0, w.steps - 1));
    DrawnFault f = instantiate(*t, w, rank, other, step, from.seq, from.node, from.other_node);
    f.cascade_of = static_cast<int>(i);
    faults.push_back(std::move(f));
  }
}

std::vector<DrawnFault> draw_faults(Rng& r, const Spec& s, const Workload& w) {
  const int64_t k = pick_weighted(r, s.count);
  std::vector<DrawnFault> faults;
  for (int64_t n = 0; n < k; ++n) {
    std::vector<double> weights;
    for (auto& t : s.mix) {
      weights.push_back(available(t, w) && !conflicts(t, faults) ? t.weight : 0.0);
    }
    if (std::none_of(weights.begin(), weights.end(), [](double x) { return x > 0; })) break;
    faults.push_back(draw_fault(r, s, s.mix[r.pick(weights)], w));
  }
  const size_t drawn = faults.size();
  for (size_t i = 0; i < drawn; ++i) draw_cascades(r, s, w, faults, i);
  return faults;
}

YAML::Node topology_node(const Layout& l) {
  YAML::Node t(YAML::NodeType::Map);
  t["ranks"] = l.ranks;
  if (l.nodes > 1) t["nodes"] = l.nodes;
  t["dp"] = l.dp;
  t["tp"] = l.tp;
  t["pp"] = l.pp;
  t["zero"] = l.zero;
  t.SetStyle(YAML::EmitterStyle::Flow);
  return t;
}

YAML::Node workload_node(const Workload& w) {
  YAML::Node n(YAML::NodeType::Map);
  n["model"] = w.model;
  n["precision"] = w.precision;
  n["steps"] = w.steps;
  if (w.checkpoint_every > 0) n["checkpoint"]["every"] = w.checkpoint_every;
  return n;
}

// One fault: its own expectation; several: any of theirs, named by the first one's symptom.
YAML::Node expect_node(const std::vector<DrawnFault>& faults) {
  if (faults.empty()) return YAML::Load("{oracle: completed}");
  if (faults.size() == 1) return YAML::Clone(faults[0].expect);
  YAML::Node e(YAML::NodeType::Map);
  if (faults[0].expect["symptom"]) e["symptom"] = faults[0].expect["symptom"].Scalar();
  e["oracle"] = "any";
  for (auto& f : faults) e["of"].push_back(YAML::Clone(f.expect));
  return e;
}

std::string describe(const GeneratedRun& g, const Workload& w) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < g.faults.size(); ++i) {
    const auto& f = g.faults[i];
    parts.push_back(
        fmt::format("{} (rank {}, step {}, seq {}){}", f.templ, f.rank, f.step, f.seq,
                    f.cascade_of >= 0 ? fmt::format(", cascade of fault {}", f.cascade_of) : ""));
  }
  for (auto& d : g.decoys) parts.push_back("decoy " + d);
  return fmt::format("{} ranks (dp {} x tp {} x pp {}, zero {}), {} {}, {} steps: {}",
                     w.layout.ranks, w.layout.dp, w.layout.tp, w.layout.pp, w.layout.zero, w.model,
                     w.precision, w.steps,
                     parts.empty() ? "no fault" : fmt::format("{}", fmt::join(parts, "; ")));
}

// A clean run: one decoy (when the spec has any) that slows without failing.
void add_decoy(Rng& r, const Spec& s, const Workload& w, GeneratedRun& g, YAML::Node& workload,
               YAML::Node& faults) {
  std::vector<double> weights;
  for (auto& t : s.decoys) weights.push_back(available(t, w) ? t.weight : 0.0);
  if (std::none_of(weights.begin(), weights.end(), [](double x) { return x > 0; })) return;
  const FaultTemplate& t = s.decoys[r.pick(weights)];
  DrawnFault d = draw_fault(r, s, t, w);
  g.decoys.push_back(t.name);
  if (d.item.IsMap()) {
    faults.push_back(d.item);
    g.decoy_faults.push_back(d);
  }
  if (t.workload.IsMap()) workload = loader::merge(workload, substitute(t.workload, {}));
}

std::string emit(const GeneratedRun& g, const Spec& s, uint64_t seed, const YAML::Node& doc) {
  YAML::Emitter out;
  out << YAML::Comment(fmt::format(
      "campaign {} (spec {}), seed {}, run {}: generated by faultline campaign; re-run it alone "
      "with faultline run FILE",
      s.name, s.file, seed, g.index));
  out << YAML::Newline << doc;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

GeneratedRun generate_run(const Spec& s, uint64_t seed, int index) {
  Rng r(seed, static_cast<uint64_t>(index));
  GeneratedRun g;
  g.index = index;
  g.name = fmt::format("{}-r{:04d}", s.name, index);
  g.file = fmt::format("scenarios/{}.yaml", g.name);
  g.clean = r.unit() < s.clean_share;
  Workload w = draw_workload(r, s);
  // A faulty run needs a workload some fault of the mix has a site in (load_spec made sure one
  // exists); a bounded number of draws keeps this a pure function of the seed.
  for (int tries = 0; !g.clean && tries < 64; ++tries) {
    if (std::any_of(s.mix.begin(), s.mix.end(), [&](auto& t) { return available(t, w); })) break;
    w = draw_workload(r, s);
  }
  YAML::Node workload = workload_node(w);
  YAML::Node faults(YAML::NodeType::Sequence);
  if (g.clean) {
    add_decoy(r, s, w, g, workload, faults);
  } else {
    g.faults = draw_faults(r, s, w);
    g.clean = g.faults.empty();
    for (auto& f : g.faults) faults.push_back(YAML::Clone(f.item));
  }
  YAML::Node doc(YAML::NodeType::Map);
  doc["name"] = g.name;
  doc["description"] = describe(g, w);
  doc["topology"] = topology_node(w.layout);
  doc["workload"] = workload;
  doc["faults"] = faults;
  doc["expect"] = expect_node(g.faults);
  doc["seed"] = rng::mix(seed * 1000003ull + static_cast<uint64_t>(index)) % 1000000 + 1;
  if (s.scenario) {
    for (auto it = s.scenario.begin(); it != s.scenario.end(); ++it) {
      doc[it->first.Scalar()] = YAML::Clone(it->second);
    }
  }
  g.yaml = emit(g, s, seed, doc);
  return g;
}

nlohmann::json GeneratedRun::manifest() const {
  nlohmann::json fl = nlohmann::json::array();
  for (auto& f : faults) {
    YAML::Emitter item, expect;
    item << YAML::Flow << f.item;
    expect << YAML::Flow << f.expect;
    fl.push_back(
        {{"template", f.templ},
         {"kind", f.kind},
         {"sites", f.sites},
         {"rank", f.rank},
         {"step", f.step},
         {"seq", f.seq},
         {"node", f.node},
         {"cascade_of", f.cascade_of < 0 ? nlohmann::json() : nlohmann::json(f.cascade_of)},
         {"fault", item.c_str()},
         {"expect", expect.c_str()}});
  }
  return {{"run", index},   {"name", name}, {"file", file},
          {"clean", clean}, {"faults", fl}, {"decoys", decoys}};
}

}  // namespace fl::harness::campaign
