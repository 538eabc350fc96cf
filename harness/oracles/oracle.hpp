// Oracles: checkers over one run summary that say whether the expected behaviour happened. The
// summary is built once from a run's history (summary.cpp); each oracle is one file in this
// folder and one word in registry.cpp's list (in the spirit of Jepsen's checkers). The same
// history always gives the same verdict, so `faultline verdict <run dir>` re-judges a run
// offline. "pass" means the expectation held: for a fault scenario, that the symptom showed (in
// time, on the expected ranks); for `completed`, that every rank finished cleanly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

struct Verdict {
  // pass, fail, unknown; interrupted when the harness was told to stop (SIGINT/SIGTERM) before
  // the run ended by itself: what it saw is in the explanation, never a pass or a fail.
  std::string outcome;
  std::string oracle;
  std::string symptom;
  std::string explanation;   // one sentence: what was (not) observed, where and when
  double manifested_s = -1;  // seconds from the first launch; -1: not observed
  int64_t step = -1;
  std::vector<int> ranks;
  nlohmann::json to_json() const;
};

// What a run's history says, parsed once.
struct RunSummary {
  int64_t t_start = -1;  // first launch
  int64_t t_end = -1;    // run_end
  int64_t t_last = -1;   // the last event
  int world = 0;
  bool run_timeout = false;
  std::string interrupted;  // the signal that stopped the harness ("" when none)
  int64_t t_interrupted = -1;
  struct Exit {
    int rank;
    int64_t t;
    std::string klass;
    int code;
    bool signaled;
    bool by_harness;
    // Closed by its launcher because a peer failed (torchrun's SIGTERM to the rest): a
    // consequence, never the failure an oracle looks for.
    bool torn_down = false;
  };
  std::vector<Exit> exits;
  std::map<int, int64_t> launch_t, exit_t;
  // The seconds of harness time in which each rank sent any event of its own (a heartbeat, a
  // step, ...; not one recovered from its file afterwards), ascending: the hang oracle tells a
  // frozen rank from the peers that wait for it by them.
  std::map<int, std::vector<int64_t>> active_s;
  // The job's first failure as the runner named it (a first_failure event; torchelastic.hpp).
  struct FirstFailed {
    int rank;
    int64_t t;
    std::string how, message;
  };
  std::optional<FirstFailed> first_failure;
  std::set<int> oom_killed;  // ranks the kernel's OOM killer ended (their memory cgroup says so)
  // When the harness's last out-of-process fault took effect (its fault_injected event; -1: none):
  // a step-triggered fault lands a tick or a busy host's delay after its step.
  int64_t t_fault_landed = -1;
  struct Step {
    int rank;
    int64_t t, step;
    std::optional<double> loss;  // nullopt: not finite
    double step_time;
    double interval;        // since the rank's previous step ended (older histories: step_time)
    double comm;            // the part of it spent inside collectives (older histories: 0)
    int64_t mem_current;    // bytes the rank's allocator held at the step's end (-1: not reported)
    bool skipped = false;   // the update was skipped (the fp16 loss scaler saw an overflow)
    int64_t mem_peak = -1;  // the rank's peak memory in use so far (-1: not reported)
    std::vector<double> comm_ops;  // each collective's time, in order (empty: not reported)
    double compute() const { return std::max(0.0, interval - comm); }
  };
  std::vector<Step> steps;
  struct Err {
    int rank;
    int64_t t, step;
    std::string klass, message;
  };
  std::vector<Err> errors;
  struct Line {
    int rank;
    int64_t t;
    std::string text;
  };
  std::vector<Line> lines;
  struct Coll {
    int rank;
    int64_t t, step;
    std::string op, group, state;
    int64_t seq;
  };
  std::vector<Coll> timeouts;
  struct Out {
    int rank;
    int64_t t;
    std::string group, digest;
  };
  std::vector<Out> outputs;
  // The tokens of one generate() call of an inference rank (a `generation` event): prompt and
  // generated tokens per request.
  struct Generation {
    int rank;
    int64_t t;
    int64_t call;
    int prompt_len;
    std::vector<std::vector<int32_t>> tokens;
  };
  std::vector<Generation> generations;

  // The baseline oracle's reference run (a `baseline` harness event): how it ended, its steps and
  // its generated tokens.
  struct Reference {
    bool present = false;
    std::string outcome, explanation, run_dir;
    int ranks = 0;
    std::vector<Step> steps;
    std::vector<Generation> generations;
  };
  Reference reference;

  bool ended() const { return t_end >= 0; }
  int64_t end_ns() const { return ended() ? t_end : (t_last >= 0 ? t_last : t_start); }
};

RunSummary summarize(const std::vector<HistoryEvent>& history);
// The same, one event at a time (in history order), for a summary kept while a run goes on;
// finish_summary before judging it.
void add_event(RunSummary& summary, const HistoryEvent& e);
void finish_summary(RunSummary& summary);

namespace oracles {

// Where and when a symptom showed.
struct Hit {
  int64_t t;
  int64_t step = -1;
  std::vector<int> ranks;
  std::string what;
};

// What an oracle found: a hit, or what it looked for (`absent`); or a verdict decided outright
// (an oracle that judges the whole run, or one that cannot judge it: outcome unknown).
struct Finding {
  std::optional<Hit> hit;
  std::string absent;
  std::optional<Verdict> verdict;
};

// What an oracle's parser gets: the scenario file (for errors), the expectation with its
// defaults filled in (`e`), the document's own map where it has one (`doc`: its marks give errors
// their line and column) and the key path ("expect", "expect.of[1]").
struct ExpectContext {
  const std::string& file;
  const YAML::Node& e;
  const YAML::Node& doc;
  const std::string& path;
  // The document's node of `key` where it has one, else the document's map, else `e`'s.
  YAML::Node at(const char* key) const;
};

class Oracle {
 public:
  virtual ~Oracle() = default;
  virtual std::string name() const = 0;
  // Its own expect keys (paths "expect.KEY", for validation and docs/scenarios.md); a key that
  // several oracles read is one KeySpec below, listed by each of them.
  virtual std::vector<KeySpec> keys() const { return {}; }
  // Its parameters from an expectation (Expect::params); errors through loader::fail_at
  // (file:line:col, key path, what is allowed). nullptr: it has none.
  virtual std::shared_ptr<const OracleParams> parse(const ExpectContext&) const { return nullptr; }
  virtual Finding check(const Expect& x, const RunSummary& run) const = 0;
};

const std::vector<const Oracle*>& all();
const Oracle* find(const std::string& name);
// Every oracle's keys, in registry order, each path once (the schema's expect keys).
std::vector<KeySpec> keys();

// An expectation's parameters as its oracle's struct P; P's defaults when it has none (an
// Expect built in code).
template <class P>
const P& params(const Expect& x) {
  static const P defaults{};
  const auto* p = dynamic_cast<const P*>(x.params.get());
  return p ? *p : defaults;
}

// Keys several oracles read (registry.cpp): expect.pattern (error_signature, oom,
// checkpoint_error), expect.factor (the ratio oracles) and expect.after_step.
KeySpec pattern_key();
KeySpec factor_key();
KeySpec after_step_key();
// expect.pattern's value, for the oracles that take one.
struct PatternParams : OracleParams {
  std::string pattern;
};
std::shared_ptr<const OracleParams> parse_pattern(const ExpectContext& c);

// Helpers the checkers share.
// Below 50 us a duration is timer noise, not a reference: ratios divide by at least this.
inline constexpr double kTimerFloor = 50e-6;

inline bool rank_ok(const Expect& x, int rank) {
  return x.ranks.empty() || std::count(x.ranks.begin(), x.ranks.end(), rank) > 0;
}

// The first item on an expected rank that `pred` accepts, with every expected rank showing the
// same thing at all (the localisation).
template <class Items, class Pred, class Describe>
std::optional<Hit> first(const Expect& x, const Items& items, Pred&& pred, Describe&& describe) {
  for (const auto& it : items) {
    if (!rank_ok(x, it.rank) || !pred(it)) continue;
    Hit h{it.t, -1, {it.rank}, describe(it)};
    if constexpr (requires { it.step; }) h.step = it.step;
    for (const auto& o : items) {
      if (o.rank != it.rank && rank_ok(x, o.rank) && pred(o) &&
          !std::count(h.ranks.begin(), h.ranks.end(), o.rank)) {
        h.ranks.push_back(o.rank);
      }
    }
    std::sort(h.ranks.begin(), h.ranks.end());
    return h;
  }
  return std::nullopt;
}

// A reported error of this class; with expect.pattern, one whose message also matches it.
Finding error_of(const Expect& x, const RunSummary& run, const std::string& klass,
                 const char* what);

// The baseline oracle's `measure: tokens` (baseline_tokens.cpp): every generate() call's tokens
// against the reference run's, the first difference localised to call, request and position.
Finding compare_tokens(const Expect& x, const RunSummary& run);

// The hang test (hang.cpp), also used by the runner to end a hung run early.
std::optional<Hit> find_hang(const Expect& x, const RunSummary& run, int64_t end_ns);
// expect.hang_s of a hang expectation.
double hang_seconds(const Expect& x);

}  // namespace oracles

Verdict judge(const Expect& expect, const std::vector<HistoryEvent>& history);
Verdict judge(const Expect& expect, const RunSummary& run);
// What the expectation alone says (judge without the interruption rule).
Verdict judge_expectation(const Expect& expect, const RunSummary& run);

// Names of every oracle (the scenario schema's expect.oracle takes the same list).
std::vector<std::string> oracle_names();

// True once `history` shows a hang per `expect` (the runner ends such runs early).
bool hang_observed(const Expect& expect, const std::vector<HistoryEvent>& history, int64_t now_ns);

}  // namespace fl::harness
