// Two suite results compared case by case (scenario, variant, seed): what stopped reproducing,
// which fixes stopped working, and time-to-symptom or throughput that moved beyond a threshold.
// A nightly job fails on any regression.
#include <cmath>
#include <map>
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
  double log_ratio_sum = 0;
  int ratios = 0;
  for (const auto& [k, now] : b) {
    const auto& [name, variant, seed] = k;
    DiffEntry e{"", name, variant, "", seed, false};
    const bool pass = now.value("outcome", "") == "pass";
    auto it = a.find(k);
    if (it == a.end()) {
      e.kind = "new";
      e.detail = now.value("outcome", "");
      e.regression = !pass;
      out.push_back(e);
      continue;
    }
    const auto& old = it->second;
    const bool was = old.value("outcome", "") == "pass";
    if (was && !pass) {
      e.kind = variant == "fix"                   ? "fix_stopped_working"
               : now.value("symptom", "").empty() ? "failing"
                                                  : "stopped_reproducing";
      e.detail = now.value("explanation", "");
      e.regression = true;
      out.push_back(e);
      continue;
    }
    if (!was && pass) {
      e.kind = "fixed_again";
      out.push_back(e);
      continue;
    }
    if (!pass || o.outcomes_only) continue;
    // Time to symptom now, as it would be on the earlier night's machine speed.
    const double t0 = old.value("manifested_s", -1.0);
    const double t1_raw = now.value("manifested_s", -1.0);
    const double t1 = t1_raw >= 0 ? t1_raw * speed : t1_raw;
    if (t0 >= 0 && t1 >= 0) {
      if (t1 > t0 * o.time_ratio && t1 - t0 > o.time_min_s) {
        out.push_back({"slower_symptom", name, variant,
                       fmt::format("time to symptom {:.1f} s -> {:.1f} s{}", t0, t1_raw,
                                   speed != 1.0 ? fmt::format(" ({:.1f} s at equal speed)", t1)
                                                : std::string()),
                       seed, true});
      } else if (t0 > t1 * o.time_ratio && t0 - t1 > o.time_min_s) {
        out.push_back({"faster_symptom", name, variant,
                       fmt::format("time to symptom {:.1f} s -> {:.1f} s{}", t0, t1_raw,
                                   speed != 1.0 ? fmt::format(" ({:.1f} s at equal speed)", t1)
                                                : std::string()),
                       seed, false});
      }
    }
    const double p0 = old.value("tokens_per_s", 0.0), p1 = now.value("tokens_per_s", 0.0) / speed;
    // Throughput matters where nothing is meant to be slow: clean runs and fix variants. One
    // short run's tokens/s moves by 3x with the load of the machine (millisecond steps), so a
    // single case is a note; the suite's geometric mean below the ratio is the regression.
    const bool healthy = variant == "fix" || now.value("symptom", "").empty();
    if (healthy && p0 > 0 && p1 > 0) {
      log_ratio_sum += std::log(p1 / p0);
      ++ratios;
      if (p1 < p0 * o.throughput_ratio) {
        out.push_back({"throughput_drop", name, variant,
                       fmt::format("tokens/s {:.0f} -> {:.0f} ({:.0f}%)", p0, p1, 100 * p1 / p0),
                       seed, false});
      }
    }
  }
  if (ratios > 0) {
    const double g = std::exp(log_ratio_sum / ratios);
    if (g < o.throughput_ratio) {
      out.push_back({"suite_throughput_drop", "(suite)", "all",
                     fmt::format("geometric mean of tokens/s over {} clean and fix runs is {:.0f}% "
                                 "of before",
                                 ratios, 100 * g),
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
