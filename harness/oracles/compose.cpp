// any / all: expectations combined. Each item of `expect.of` is judged on its own, as if it were
// the scenario's expectation (its inversion with `absent: true` included); `any` passes when one
// of them passes, `all` when every one does. The same history gives the same verdict.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

constexpr double kNs = 1e9;

struct Judged {
  std::vector<Verdict> v;
  std::vector<std::string> text;  // "item N (oracle): outcome: explanation"
};

Judged judge_items(const Expect& x, const RunSummary& run) {
  Judged j;
  for (size_t i = 0; i < x.of.size(); ++i) {
    Verdict v = judge_expectation(x.of[i], run);
    // A pass says when in its own words; the combined verdict says it once.
    if (const auto at = v.explanation.rfind(" (at ");
        v.outcome == "pass" && at != std::string::npos && v.explanation.back() == ')') {
      v.explanation.resize(at);
    }
    j.text.push_back(fmt::format("[{}] {}{}: {}: {}", i, x.of[i].oracle,
                                 x.of[i].absent ? " absent" : "", v.outcome, v.explanation));
    j.v.push_back(std::move(v));
  }
  return j;
}

Hit hit_of(const RunSummary& run, const Verdict& v, std::string what) {
  const int64_t t =
      v.manifested_s >= 0 ? run.t_start + static_cast<int64_t>(v.manifested_s * kNs) : run.end_ns();
  return Hit{t, v.step, v.ranks, std::move(what)};
}

Finding unknown(std::string why) {
  Verdict v;
  v.outcome = "unknown";
  v.explanation = std::move(why);
  return {std::nullopt, "", v};
}

class Any : public Oracle {
 public:
  std::string name() const override { return "any"; }
  Finding check(const Expect& x, const RunSummary& run) const override {
    if (x.of.empty()) return unknown("expect.of names no oracle to combine");
    const Judged j = judge_items(x, run);
    // The earliest item that passed decides where and when.
    int best = -1;
    for (size_t i = 0; i < j.v.size(); ++i) {
      if (j.v[i].outcome != "pass") continue;
      if (best < 0 ||
          (j.v[i].manifested_s >= 0 &&
           (j.v[best].manifested_s < 0 || j.v[i].manifested_s < j.v[best].manifested_s))) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      return {hit_of(run, j.v[best], fmt::format("any of {}: {}", j.v.size(), j.text[best])), "",
              std::nullopt};
    }
    const bool undecided = std::any_of(j.v.begin(), j.v.end(),
                                       [](const Verdict& v) { return v.outcome == "unknown"; });
    if (undecided) {
      return unknown(
          fmt::format("none passed and some cannot be decided: {}", fmt::join(j.text, "; ")));
    }
    return {std::nullopt, fmt::format("none of {} passed: {}", j.v.size(), fmt::join(j.text, "; ")),
            std::nullopt};
  }
};

class All : public Oracle {
 public:
  std::string name() const override { return "all"; }
  Finding check(const Expect& x, const RunSummary& run) const override {
    if (x.of.empty()) return unknown("expect.of names no oracle to combine");
    const Judged j = judge_items(x, run);
    std::vector<std::string> failed, undecided;
    int last = -1;
    std::vector<int> ranks;
    for (size_t i = 0; i < j.v.size(); ++i) {
      if (j.v[i].outcome == "fail") failed.push_back(j.text[i]);
      if (j.v[i].outcome != "pass" && j.v[i].outcome != "fail") undecided.push_back(j.text[i]);
      if (j.v[i].outcome != "pass") continue;
      for (int r : j.v[i].ranks) {
        if (!std::count(ranks.begin(), ranks.end(), r)) ranks.push_back(r);
      }
      if (last < 0 || j.v[i].manifested_s > j.v[last].manifested_s) last = static_cast<int>(i);
    }
    if (!failed.empty()) {
      return {std::nullopt,
              fmt::format("{} of {} did not pass: {}", failed.size(), j.v.size(),
                          fmt::join(j.text, "; ")),
              std::nullopt};
    }
    if (!undecided.empty()) {
      return unknown(fmt::format("{} of {} cannot be decided: {}", undecided.size(), j.v.size(),
                                 fmt::join(j.text, "; ")));
    }
    // All passed: the symptom is complete when the last of them showed.
    std::sort(ranks.begin(), ranks.end());
    Hit h = hit_of(run, j.v[last],
                   fmt::format("all {} passed: {}", j.v.size(), fmt::join(j.text, "; ")));
    h.ranks = ranks;
    return {h, "", std::nullopt};
  }
};

}  // namespace

const Oracle& any_oracle() {
  static const Any o;
  return o;
}

const Oracle& all_oracle() {
  static const All o;
  return o;
}

}  // namespace fl::harness::oracles
