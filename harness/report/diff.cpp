// Two suite results compared case by case (scenario, variant, seed): what stopped reproducing,
// which fixes stopped working, and time-to-symptom or throughput that moved beyond a threshold.
// A nightly job fails on any regression.
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "harness/report/report.hpp"

namespace fl::harness {

namespace {

using Key = std::tuple<std::string, std::string, uint64_t>;

std::map<Key, nlohmann::json> by_case(const nlohmann::json& s) {
  std::map<Key, nlohmann::json> m;
  for (const auto& c : s["cases"]) {
    m[{c.value("scenario", ""), c.value("variant", "faulty"), c.value("seed", uint64_t{0})}] = c;
  }
  return m;
}

// The machine's speed while a suite ran: the median of the reference GEMM's GFLOP/s sampled
// through the suite's window (provenance.calibration.gflops); 0 when the summary has none.
double calibration_of(const nlohmann::json& s) {
  const auto p = s.find("provenance");
  if (p == s.end() || !p->is_object()) return 0;
  const auto c = p->find("calibration");
  if (c == p->end() || !c->is_object()) return 0;
  const double g = c->value("gflops", 0.0);
  return std::isfinite(g) && g > 0 ? g : 0;
}

// The entry for a case whose outcome moved from `old` to `now` (`c` names the case); nullopt when
// it did not.
std::optional<DiffEntry> outcome_change(DiffEntry c, const nlohmann::json& old,
                                        const nlohmann::json& now) {
  const bool pass = now.value("outcome", "") == "pass";
  const bool was = old.value("outcome", "") == "pass";
  if (was && !pass) {
    c.kind = c.variant == "fix"                 ? "fix_stopped_working"
             : now.value("symptom", "").empty() ? "failing"
                                                : "stopped_reproducing";
    c.detail = now.value("explanation", "");
    c.regression = true;
    return c;
  }
  if (!was && pass) {
    c.kind = "fixed_again";
    return c;
  }
  return std::nullopt;
}

// Time to symptom now, as it would be on the earlier night's machine speed, against before.
void compare_time_to_symptom(const DiffEntry& c, const nlohmann::json& old,
                             const nlohmann::json& now, double speed, const DiffOptions& o,
                             std::vector<DiffEntry>& out) {
  const double t0 = old.value("manifested_s", -1.0);
  const double t1_raw = now.value("manifested_s", -1.0);
  const double t1 = t1_raw >= 0 ? t1_raw * speed : t1_raw;
  if (!(t0 >= 0 && t1 >= 0)) return;
  const std::string detail =
      fmt::format("time to symptom {:.1f} s -> {:.1f} s{}", t0, t1_raw,
                  speed != 1.0 ? fmt::format(" ({:.1f} s at equal speed)", t1) : std::string());
  if (t1 > t0 * o.time_ratio && t1 - t0 > o.time_min_s) {
    out.push_back({"slower_symptom", c.scenario, c.variant, detail, c.seed, true});
  } else if (t0 > t1 * o.time_ratio && t0 - t1 > o.time_min_s) {
    out.push_back({"faster_symptom", c.scenario, c.variant, detail, c.seed, false});
  }
}

// Tokens/s ratios of the healthy cases, whose geometric mean judges the suite.
struct ThroughputRatios {
  double log_sum = 0;
  int n = 0;
};

// Throughput matters where nothing is meant to be slow: clean runs and fix variants. One short
// run's tokens/s moves by 3x with the load of the machine (millisecond steps), so a single case
// is a note; the suite's geometric mean below the ratio is the regression.
void compare_throughput(const DiffEntry& c, const nlohmann::json& old, const nlohmann::json& now,
                        double speed, const DiffOptions& o, std::vector<DiffEntry>& out,
                        ThroughputRatios& ratios) {
  const double p0 = old.value("tokens_per_s", 0.0), p1 = now.value("tokens_per_s", 0.0) / speed;
  const bool healthy = c.variant == "fix" || now.value("symptom", "").empty();
  if (!(healthy && p0 > 0 && p1 > 0)) return;
  ratios.log_sum += std::log(p1 / p0);
  ++ratios.n;
  if (p1 < p0 * o.throughput_ratio) {
    out.push_back({"throughput_drop", c.scenario, c.variant,
                   fmt::format("tokens/s {:.0f} -> {:.0f} ({:.0f}%)", p0, p1, 100 * p1 / p0),
                   c.seed, false});
  }
}

}  // namespace

double speed_ratio(const nlohmann::json& before, const nlohmann::json& after) {
  const double c0 = calibration_of(before), c1 = calibration_of(after);
  return c0 > 0 && c1 > 0 ? c1 / c0 : 1.0;
}

std::vector<DiffEntry> diff_suites(const nlohmann::json& before, const nlohmann::json& after,
                                   const DiffOptions& o) {
  const auto a = by_case(before), b = by_case(after);
  // Timings of two nights are compared after taking out how fast the machine was in each (its
  // reference GEMM measured in the same window as the runs): a busy or slower machine is not a
  // regression, code that got slower on the same machine is.
  const double speed = speed_ratio(before, after);
  std::vector<DiffEntry> out;
  if (speed != 1.0) {
    out.push_back({"machine_speed", "(suite)", "all",
                   fmt::format("reference GEMM {:.2f} -> {:.2f} GFLOP/s ({:.0f}%): timings and "
                               "throughput are compared at equal machine speed",
                               calibration_of(before), calibration_of(after), 100 * speed),
                   0, false});
  }
  ThroughputRatios ratios;
  for (const auto& [k, now] : b) {
    const auto& [name, variant, seed] = k;
    DiffEntry e{"", name, variant, "", seed, false};
    auto it = a.find(k);
    if (it == a.end()) {
      e.kind = "new";
      e.detail = now.value("outcome", "");
      e.regression = now.value("outcome", "") != "pass";
      out.push_back(e);
      continue;
    }
    if (auto changed = outcome_change(e, it->second, now)) {
      out.push_back(*changed);
      continue;
    }
    if (now.value("outcome", "") != "pass" || o.outcomes_only) continue;
    compare_time_to_symptom(e, it->second, now, speed, o, out);
    compare_throughput(e, it->second, now, speed, o, out, ratios);
  }
  if (ratios.n > 0) {
    const double g = std::exp(ratios.log_sum / ratios.n);
    if (g < o.throughput_ratio) {
      out.push_back({"suite_throughput_drop", "(suite)", "all",
                     fmt::format("geometric mean of tokens/s over {} clean and fix runs is {:.0f}% "
                                 "of before",
                                 ratios.n, 100 * g),
                     0, true});
    }
  }
  for (const auto& [k, old] : a) {
    if (!b.count(k)) {
      out.push_back({"missing", std::get<0>(k), std::get<1>(k), "not in the newer suite",
                     std::get<2>(k), false});
    }
  }
  return out;
}

std::string diff_text(const std::vector<DiffEntry>& d, const std::string& before,
                      const std::string& after) {
  int regressions = 0;
  std::string s = fmt::format("faultline diff {} -> {}\n", before, after);
  for (const auto& e : d) {
    regressions += e.regression;
    s +=
        fmt::format("  {:<10} {:<22} {} [{}] seed {}{}\n", e.regression ? "REGRESSION" : "note",
                    e.kind, e.scenario, e.variant, e.seed, e.detail.empty() ? "" : ": " + e.detail);
  }
  s += fmt::format("{} regression(s), {} other change(s)\n", regressions,
                   d.size() - static_cast<size_t>(regressions));
  return s;
}

}  // namespace fl::harness
