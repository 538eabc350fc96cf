// The oracles, and the verdict: an oracle's finding, then the checks every oracle shares (in
// time, on the expected ranks; a fix variant's inversion).
#include <regex>

#include <fmt/format.h>

#include "harness/model/key_checks.hpp"
#include "harness/oracles/oracle.hpp"

// One word per oracle (its file defines NAME_oracle()); the order is docs/scenarios.md's.
#define FAULTLINE_ORACLES(X) \
  X(completed)               \
  X(exit_class)              \
  X(first_failure)           \
  X(error_signature)         \
  X(hang)                    \
  X(comm_timeout)            \
  X(loss_nonfinite)          \
  X(loss_divergence)         \
  X(oom)                     \
  X(checkpoint_error)        \
  X(output_mismatch)         \
  X(throughput_degradation)  \
  X(memory_growth)           \
  X(skipped_steps)           \
  X(baseline)                \
  X(any)                     \
  X(all)

namespace fl::harness {

namespace oracles {

#define FAULTLINE_DECLARE_ORACLE(name) const Oracle& name##_oracle();
FAULTLINE_ORACLES(FAULTLINE_DECLARE_ORACLE)
#undef FAULTLINE_DECLARE_ORACLE

const std::vector<const Oracle*>& all() {
#define FAULTLINE_LIST_ORACLE(name) &name##_oracle(),
  static const std::vector<const Oracle*> list = {FAULTLINE_ORACLES(FAULTLINE_LIST_ORACLE)};
#undef FAULTLINE_LIST_ORACLE
  return list;
}

const Oracle* find(const std::string& name) {
  for (const auto* o : all()) {
    if (o->name() == name) return o;
  }
  return nullptr;
}

std::vector<KeySpec> keys() {
  std::vector<KeySpec> out;
  for (const auto* o : all()) {
    for (auto& k : o->keys()) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const KeySpec& have) { return have.path == k.path; });
      if (!seen) out.push_back(std::move(k));
    }
  }
  return out;
}

YAML::Node ExpectContext::at(const char* key) const {
  if (doc && doc.IsMap() && doc[key]) return doc[key];
  return doc ? doc : e;
}

KeySpec pattern_key() {
  return {"expect.pattern",
          KeyType::kString,
          "\"\"",
          "error_signature: ECMAScript regex on rank output; oom, checkpoint_error, "
          "first_failure: regex the error message must also match",
          {},
          0,
          0,
          false,
          loader::check_regex};
}

KeySpec factor_key() {
  return {"expect.factor",
          KeyType::kFloat,
          "2",
          "loss_divergence / throughput_degradation / memory_growth: ratio (throughput: a rank's "
          "compute time against its peers', or time in collectives against compute, after vs "
          "before; memory_growth: a rank's memory in use at its last step against its first steps)",
          {},
          1,
          1e9};
}

KeySpec after_step_key() {
  return {"expect.after_step",
          KeyType::kInt,
          "-1",
          "throughput_degradation: first degraded step (-1: "
          "the last two thirds)",
          {},
          -1,
          1e9};
}

std::shared_ptr<const OracleParams> parse_pattern(const ExpectContext& c) {
  auto p = std::make_shared<PatternParams>();
  p->pattern = c.e["pattern"].as<std::string>();
  return p;
}

Finding error_of(const Expect& x, const RunSummary& run, const std::string& klass,
                 const char* what) {
  const std::string& pattern = params<PatternParams>(x).pattern;
  std::optional<std::regex> re;
  if (!pattern.empty()) re.emplace(pattern, std::regex::ECMAScript);
  Finding f;
  f.hit = first(
      x, run.errors,
      [&](const RunSummary::Err& e) {
        return e.klass == klass && (!re || std::regex_search(e.message, *re));
      },
      [&](const RunSummary::Err& e) { return fmt::format("{}: {}", what, e.message); });
  f.absent = re ? fmt::format("no rank reported {} matching /{}/", what, pattern)
                : fmt::format("no rank reported {}", what);
  return f;
}

}  // namespace oracles

namespace {

constexpr double kNs = 1e9;

Verdict judge_one(const Expect& x, const RunSummary& run) {
  Verdict v;
  v.oracle = x.oracle;
  v.symptom = x.symptom;
  if (run.t_start < 0) {
    v.outcome = "unknown";
    v.explanation = "no rank was launched (see the harness error)";
    return v;
  }
  const auto* oracle = oracles::find(x.oracle);
  if (!oracle) {
    v.outcome = "unknown";
    v.explanation = fmt::format("no oracle named '{}'", x.oracle);
    return v;
  }
  oracles::Finding found = oracle->check(x, run);
  if (found.verdict) {
    Verdict d = *found.verdict;
    d.oracle = x.oracle;
    d.symptom = x.symptom;
    return d;
  }
  if (!found.hit) {
    v.outcome = run.ended() ? "fail" : "unknown";
    v.explanation =
        run.ended() ? found.absent : found.absent + " (the history ends before the run did)";
    return v;
  }
  const oracles::Hit& hit = *found.hit;
  v.manifested_s = static_cast<double>(hit.t - run.t_start) / kNs;
  v.step = hit.step;
  v.ranks = hit.ranks;
  // within_s counts from the job's first step when it had one: how long ranks take to start
  // depends on the host's load, not on the fault.
  int64_t t_ref = run.t_start;
  for (auto& s : run.steps) {
    if (s.t <= hit.t && (t_ref == run.t_start || s.t < t_ref)) t_ref = s.t;
  }
  const double since = static_cast<double>(hit.t - t_ref) / kNs;
  if (x.within_s > 0 && since > x.within_s) {
    v.outcome = "fail";
    v.explanation =
        fmt::format("{} — but {:.1f} s after {}, later than within_s {:.1f}", hit.what, since,
                    t_ref == run.t_start ? "the first launch" : "the first step", x.within_s);
    return v;
  }
  v.outcome = "pass";
  v.explanation = fmt::format("{} (at {:.1f} s)", hit.what, v.manifested_s);
  return v;
}

}  // namespace

nlohmann::json Verdict::to_json() const {
  return {{"outcome", outcome},
          {"oracle", oracle},
          {"symptom", symptom},
          {"explanation", explanation},
          {"manifested_s", manifested_s},
          {"step", step},
          {"ranks", ranks}};
}

std::vector<std::string> oracle_names() {
  std::vector<std::string> n;
  for (const auto* o : oracles::all()) n.push_back(o->name());
  return n;
}

bool hang_observed(const Expect& x, const std::vector<HistoryEvent>& history, int64_t now_ns) {
  return oracles::find_hang(x, summarize(history), now_ns).has_value();
}

Verdict judge(const Expect& x, const std::vector<HistoryEvent>& history) {
  return judge(x, summarize(history));
}

Verdict judge(const Expect& x, const RunSummary& run) {
  Verdict v = judge_expectation(x, run);
  if (run.interrupted.empty()) return v;
  // The run was cut short from outside: whatever the oracle saw until then decides nothing.
  Verdict i;
  i.outcome = "interrupted";
  i.oracle = x.oracle;
  i.symptom = x.symptom;
  const double at =
      run.t_start >= 0 ? static_cast<double>(run.t_interrupted - run.t_start) / kNs : 0.0;
  i.explanation = fmt::format(
      "the harness got {} at {:.1f} s and stopped the run before it ended (until then the "
      "oracle would have said {}: {})",
      run.interrupted, std::max(0.0, at), v.outcome, v.explanation);
  return i;
}

Verdict judge_expectation(const Expect& x, const RunSummary& run) {
  if (!x.absent) return judge_one(x, run);
  // A fix variant: the oracle must not find its symptom, and the run must complete.
  Verdict v = judge_one(x, run);
  if (v.outcome == "unknown") return v;
  if (v.outcome == "pass") {
    v.outcome = "fail";
    v.explanation = "the symptom is still there: " + v.explanation;
    return v;
  }
  Expect c = x;
  c.oracle = "completed";
  c.ranks.clear();
  Verdict done = judge_one(c, run);
  done.oracle = x.oracle;
  done.symptom = x.symptom;
  if (done.outcome == "pass") {
    done.explanation = fmt::format("not observed ({}); {}", v.explanation, done.explanation);
  }
  return done;
}

}  // namespace fl::harness
