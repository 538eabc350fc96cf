// hang: no step progress for expect.hang_s (and for several of the job's own step intervals)
// while ranks live. The runner asks the same test during a run to end a hung run early.
#include <fmt/format.h>

#include "base/ranks.hpp"
#include "base/stats.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {

namespace {
constexpr double kNs = 1e9;
}  // namespace

namespace {
struct HangParams : OracleParams {
  double hang_s = 10;
};
}  // namespace

double hang_seconds(const Expect& x) {
  return params<HangParams>(x).hang_s;
}

// How many ordinary step intervals a gap must span to be a hang, at least (besides hang_s): a
// job whose steps all take longer on a busy host needs a longer gap before it counts as stuck.
constexpr double kHangIntervals = 5;

// A rank silent this long (not even a heartbeat: probes and workers beat every second) while a
// live peer is still heard from is frozen: stopped, or stuck where its own threads cannot run.
constexpr int64_t kFrozenS = 3;

// The live ranks that sent nothing in the kFrozenS seconds up to `at` while another live rank
// did; empty when every live rank was heard from (all wait alike) or none was.
std::vector<int> frozen_ranks(const RunSummary& f, const std::vector<int>& alive, int64_t at) {
  const int64_t to = at / static_cast<int64_t>(kNs), from = to - kFrozenS;
  std::vector<int> frozen;
  bool heard = false;
  for (int r : alive) {
    const auto it = f.active_s.find(r);
    const bool active = it != f.active_s.end() &&
                        std::any_of(std::lower_bound(it->second.begin(), it->second.end(), from),
                                    it->second.end(), [&](int64_t s) { return s <= to; });
    if (active) {
      heard = true;
    } else {
      frozen.push_back(r);
    }
  }
  return heard ? frozen : std::vector<int>{};
}

// The hang test: a gap of at least hang_s, and of kHangIntervals times the job's median step
// interval so far, with no step progress while some rank is alive. The clock starts at the
// job's first step: before it the ranks are still starting (a job stuck there is a setup
// failure, judged by comm_timeout or exit oracles), and how long starting takes depends on the
// host's load.
std::optional<Hit> find_hang(const Expect& x, const RunSummary& f, int64_t end_ns) {
  if (f.t_start < 0 || f.steps.empty()) return std::nullopt;
  std::vector<int64_t> progress;
  for (auto& s : f.steps) progress.push_back(s.t);
  std::sort(progress.begin(), progress.end());
  // The job's pace: when each step number was first reported, in order.
  std::map<int64_t, int64_t> first_t;
  for (auto& s : f.steps) {
    auto [it, fresh] = first_t.emplace(s.step, s.t);
    if (!fresh) it->second = std::min(it->second, s.t);
  }
  // The first step's own duration, as its ranks measured it (no earlier step marks its start):
  // without it a gap right after the first step would have no pace to be judged against.
  std::vector<double> first_own;
  if (!first_t.empty()) {
    for (auto& s : f.steps) {
      if (s.step == first_t.begin()->first) first_own.push_back(s.interval * kNs);
    }
  }
  progress.push_back(end_ns);
  const auto floor_need = static_cast<int64_t>(hang_seconds(x) * kNs);
  for (size_t i = 0; i + 1 < progress.size(); ++i) {
    if (progress[i + 1] - progress[i] < floor_need) continue;
    std::vector<double> intervals;
    if (!first_own.empty()) intervals.push_back(stats::upper_median(first_own));
    int64_t prev = -1;
    for (auto& [st, t] : first_t) {
      if (t > progress[i]) break;
      if (prev >= 0) intervals.push_back(static_cast<double>(t - prev));
      prev = t;
    }
    const int64_t need =
        std::max(floor_need, static_cast<int64_t>(kHangIntervals * stats::upper_median(intervals)));
    if (progress[i + 1] - progress[i] < need) continue;
    const int64_t at = progress[i] + need;
    Hit h{at, -1, {}, ""};
    std::vector<int> alive;
    for (auto& [r, t] : f.launch_t) {
      const auto ex = f.exit_t.find(r);
      if (t <= progress[i] && (ex == f.exit_t.end() || ex->second > at)) alive.push_back(r);
    }
    // The frozen rank is the one to name, not the peers blocked in a collective with it (which
    // still beat): an outside job's probe shows no more of a stopped rank than this.
    std::vector<int> frozen;
    for (int r : frozen_ranks(f, alive, at)) {
      if (rank_ok(x, r)) frozen.push_back(r);
    }
    for (int r : alive) {
      if (rank_ok(x, r)) h.ranks.push_back(r);
    }
    if (h.ranks.empty()) continue;
    const std::string waiting = format_ranks(h.ranks);
    if (!frozen.empty()) h.ranks = frozen;
    int64_t last = -1;
    for (auto& s : f.steps) {
      if (s.t <= progress[i]) last = std::max(last, s.step);
    }
    h.step = last;
    h.what = fmt::format("no step progress for {:.1f} s after step {} while {} stayed alive",
                         static_cast<double>(need) / kNs, last, waiting);
    if (!frozen.empty()) {
      h.what += fmt::format("; {} sent nothing for {} s before (frozen) while the others did",
                            format_ranks(frozen), kFrozenS);
    }
    return h;
  }
  return std::nullopt;
}

namespace {

class Hang : public Oracle {
 public:
  std::string name() const override { return "hang"; }
  std::vector<KeySpec> keys() const override {
    return {{"expect.hang_s",
             KeyType::kFloat,
             "10",
             "hang: seconds without step progress while ranks live (and at least 5 of the job's "
             "median step intervals; counted from its first step)",
             {},
             0.1,
             1e6}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<HangParams>();
    p->hang_s = c.e["hang_s"].as<double>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    return {
        find_hang(x, f, f.end_ns()),
        fmt::format("step progress never stopped for {:.1f} s while ranks lived", hang_seconds(x)),
        std::nullopt};
  }
};

}  // namespace

const Oracle& hang_oracle() {
  static const Hang o;
  return o;
}

}  // namespace fl::harness::oracles
