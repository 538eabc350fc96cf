// Seeded fault campaigns (docs/benchmarks.md#campaigns-and-shrinking): a campaign SPEC names a
// workload family, a weighted fault mix, distributions for when, where and how many faults a run
// gets, cascades and a share of clean runs with decoys; `faultline campaign SPEC --seed S --runs
// N` draws N complete scenario files from it (the same seed gives the same files byte for byte),
// validates every one with the scenario loader, runs them through the suite executor and records
// each run's ground truth: every fault, whether it fired and whether it manifested.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

namespace fl::harness::campaign {

// A value drawn with a weight; `node` is where the spec gave it (errors point there).
template <class T>
struct Weighted {
  T value{};
  double weight = 1;
  YAML::Node node;
};

struct Layout {
  int ranks = 1, nodes = 1, dp = 1, tp = 1, pp = 1, zero = 0;
};

struct IntRange {
  int64_t min = 0, max = 0;
};

// One entry of faults.mix or clean.decoys: a fault item of a scenario's `faults:` list (or
// workload overrides, for a decoy such as an evaluation pause) whose strings may hold
// placeholders ({rank}, {other_rank}, {step}, {seq}, {node}, {other_node}, {steps}, {ranks}),
// and the expectation it shows on its own (decoys have none).
struct FaultTemplate {
  std::string name;
  double weight = 1;
  YAML::Node fault;     // null for a decoy that only changes the workload
  YAML::Node workload;  // decoys: overrides of the run's workload (null: none)
  YAML::Node expect;    // mix entries: the expectation (a map of expect keys)
  std::string kind;     // the fault item's kind: plan, signal, network, ... ("" for none)
  std::vector<std::string> sites;  // the plan's sites (kind plan)
  YAML::Node node;                 // the entry in the spec
};

struct Cascade {
  std::string from, to;  // mix entry names
  double probability = 1;
  IntRange lag;               // steps after the first fault's step
  std::string rank = "same";  // same: the first fault's rank; other: another rank
  YAML::Node node;
};

struct Spec {
  std::string file, name;
  std::vector<Weighted<Layout>> layouts;
  std::vector<Weighted<std::string>> precisions, models;
  std::vector<Weighted<int64_t>> steps, checkpoint_every;
  std::vector<Weighted<int64_t>> count;  // how many faults a faulty run gets
  std::vector<FaultTemplate> mix;
  IntRange step{1, 1000000}, seq{0, 16};
  std::vector<double> rank_weights;  // empty: uniform over the run's ranks
  std::vector<Cascade> cascades;
  double clean_share = 0;
  std::vector<FaultTemplate> decoys;
  YAML::Node scenario;  // keys merged into every generated scenario (timeouts, env, detectors)
};

// Reads and checks a spec: unknown keys, weights that sum to 0, a fault whose site no layout of
// the family has, empty lists, bad ranges. Throws ScenarioError "file:line:col: key: problem
// (allowed: ...)"; nothing has run.
Spec load_spec(const std::string& path);

// Why `site` is missing from a layout ("" when the layout has it): "it needs pp > 1", ...
std::string site_missing(const std::string& site, const Layout& l, const std::string& precision,
                         int64_t checkpoint_every);

// One fault of a generated run as the ground truth records it.
struct DrawnFault {
  std::string templ, kind;
  std::vector<std::string> sites;
  int rank = -1, other_rank = -1, node = -1, other_node = -1;
  int64_t step = -1, seq = -1;
  int cascade_of = -1;  // index of the fault that triggered it, -1: none
  YAML::Node item;      // the scenario's fault item
  YAML::Node expect;    // its own expectation
};

struct GeneratedRun {
  int index = 0;           // from 1
  std::string name, file;  // scenario name; file relative to the campaign directory
  std::string yaml;        // the complete scenario
  bool clean = false;
  std::vector<DrawnFault> faults;
  std::vector<std::string> decoys;
  std::vector<DrawnFault> decoy_faults;  // a decoy's fault item (one that only changes the
                                         // workload has none)
  nlohmann::json manifest() const;       // what manifest.json lists for this run
};

// Run `index` (from 1) of campaign `seed`: a pure function of (spec, seed, index), so a longer
// campaign of the same seed starts with the same runs.
GeneratedRun generate_run(const Spec& spec, uint64_t seed, int index);

// SplitMix64 stream keyed by (seed, run index): every draw of a run comes from here.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream);
  uint64_t next();
  double unit();                                    // [0, 1)
  int64_t between(int64_t lo, int64_t hi);          // [lo, hi]
  size_t pick(const std::vector<double>& weights);  // index by weight (sum > 0)

 private:
  uint64_t state_;
};

// What a run's history says about each of its faults (ground_truth.jsonl, one line per run).
// fired: a plan fault's site fired on some rank (a `fault_fired` event), an out-of-process fault
// was injected (`fault_injected` of its kind on its rank). manifested: it fired, its own
// expectation passes on the run's history (the oracle saw its symptom) and the oracle's finding
// is not earlier than the fault's first firing.
nlohmann::json run_truth(const GeneratedRun& run, const std::string& run_dir);

struct Options {
  std::string spec, out_dir;
  uint64_t seed = 0;
  int runs = 0;
  int jobs = 2;
  bool no_run = false;  // generate and validate only
  std::string faultline_bin;
  bool progress = true;
};

struct Result {
  std::string dir, suite_dir;
  int runs = 0, faulty = 0, clean = 0;
  int reproduced = 0, clean_completed = 0;
  int faults = 0, cascades = 0, fired = 0, manifested = 0;
  std::map<std::string, int> outcomes;
  std::string interrupted;  // the signal the campaign got ("" when none)
  double wall_s = 0, load_start = -1, load_end = -1;
  nlohmann::json to_json() const;
  std::string text() const;
};

// Generates, validates (every file, before anything runs), runs and scores a campaign.
Result run_campaign(const Options& o);

}  // namespace fl::harness::campaign
