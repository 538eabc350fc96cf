// What a finished suite says to a person (the table: reproduced? fix verified? then one line per
// case that did not simply pass) and to tools (summary.json, docs/catalog.md#summaryjson).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "harness/suite/executor.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness {

namespace {

// Below the table: one line per case that did not simply pass (skipped ones counted by reason),
// a merge's missing cases and duplicates, and the notes.
std::string case_lines(const SuiteResult& r) {
  std::string out;
  std::map<std::string, int> skipped;  // explanation -> cases (fail-fast leaves many alike)
  for (const auto& c : r.cases) {
    if (c.outcome == "skipped") {
      ++skipped[c.explanation];
    } else if (c.outcome == "flaky") {
      const auto& first = c.attempts.front();
      out += fmt::format("  FLAKY {}{} seed {}: passed on try {} of {}; try 1: {}: {} ({})\n",
                         c.name, c.fix ? " [fix]" : "", c.seed, c.attempts.size(),
                         c.attempts.size(), first.outcome, first.explanation, first.run_dir);
    } else if (c.outcome != "pass") {
      const char* label = c.outcome == "fail"          ? "FAILED"
                          : c.outcome == "error"       ? "ERROR"
                          : c.outcome == "interrupted" ? "INTERRUPTED"
                                                       : "UNKNOWN";
      out += fmt::format("  {} {}{} seed {}: {}{} ({})\n", label, c.name, c.fix ? " [fix]" : "",
                         c.seed, c.explanation,
                         c.attempts.size() > 1 ? fmt::format(" [{} tries]", c.attempts.size()) : "",
                         c.run_dir);
    }
  }
  for (const auto& [why, n] : skipped) {
    out += fmt::format("  SKIPPED {} case{}: {}\n", n, n == 1 ? "" : "s", why);
  }
  for (const auto& c : r.missing) {
    out += fmt::format("  MISSING {}: {}\n", case_label(c), c.explanation);
  }
  if (r.merge.is_object()) {
    for (const auto& d : r.merge.value("duplicates", nlohmann::json::array())) {
      out += fmt::format("  DUPLICATE {}\n", d.value("detail", ""));
    }
  }
  for (const auto& n : r.notes) out += fmt::format("  NOTE {}\n", n);
  return out;
}

}  // namespace

std::string suite_table(const SuiteResult& r) {
  // One row per scenario and seed: did the symptom reproduce, did the fix clear it.
  struct Row {
    std::string symptom, name;
    uint64_t seed;
    const SuiteCase *faulty = nullptr, *fix = nullptr;
  };
  std::vector<Row> rows;
  for (const auto& c : r.cases) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](auto& x) { return x.name == c.name && x.seed == c.seed; });
    if (it == rows.end()) {
      rows.push_back({c.symptom, c.name, c.seed});
      it = rows.end() - 1;
    }
    (c.fix ? it->fix : it->faulty) = &c;
  }
  std::string out = fmt::format("{:<6} {:<36} {:>5}  {:<11} {:<13} {:>9}\n", "symptom", "scenario",
                                "seed", "reproduced", "fix verified", "symptom@");
  auto word = [](const SuiteCase* c, const char* yes) {
    if (!c) return std::string("-");
    if (c->outcome == "pass") return std::string(yes);
    if (c->outcome == "flaky") return std::string(yes) + " (flaky)";
    if (c->outcome == "skipped") return std::string("skipped");
    return "NO (" + c->outcome + ")";
  };
  for (const auto& x : rows) {
    const bool clean = x.symptom.empty();
    out += fmt::format("{:<6} {:<36} {:>5}  {:<11} {:<13} {:>9}\n", clean ? "clean" : x.symptom,
                       x.name.substr(0, 36), x.seed, word(x.faulty, clean ? "clean ok" : "yes"),
                       word(x.fix, "yes"),
                       x.faulty && x.faulty->manifested_s >= 0
                           ? fmt::format("{:.1f} s", x.faulty->manifested_s)
                           : std::string("-"));
  }
  const int errors = r.count("error") + r.count("unknown");
  const int interrupted = r.count("interrupted");
  out += fmt::format(
      "{} runs: {} passed, {} failed, {} errors, {} flaky, {} skipped{} in {:.1f} s; results in "
      "{}\n",
      r.cases.size(), r.count("pass"), r.count("fail"), errors, r.count("flaky"),
      r.count("skipped"),
      (interrupted ? fmt::format(", {} interrupted", interrupted) : "") +
          (r.missing.empty() ? "" : fmt::format(", {} missing", r.missing.size())),
      r.wall_s, r.dir);
  if (!r.interrupted.empty()) {
    out += fmt::format(
        "  INTERRUPTED the suite got {}: runs in flight were stopped, the rest not "
        "started\n",
        r.interrupted);
  }
  return out + case_lines(r);
}

nlohmann::json suite_json(const SuiteResult& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json attempts = nlohmann::json::array();
    for (const auto& a : c.attempts) {
      attempts.push_back({{"outcome", a.outcome},
                          {"explanation", a.explanation},
                          {"run_dir", a.run_dir},
                          {"wall_s", a.wall_s}});
      if (!a.job.empty()) attempts.back()["slurm_task"] = a.job;
    }
    cases.push_back({{"id", c.id()},
                     {"scenario", c.name},
                     {"file", c.scenario_file},
                     {"symptom", c.symptom},
                     {"stage", c.stage},
                     {"seed", c.seed},
                     {"variant", c.variant()},
                     {"outcome", c.outcome},
                     {"explanation", c.explanation},
                     {"manifested_s", c.manifested_s},
                     {"wall_s", c.wall_s},
                     {"tokens_per_s", c.tokens_per_s},
                     {"run_dir", c.run_dir},
                     {"attempts", attempts}});
    if (!c.shard.empty()) cases.back()["shard"] = c.shard;
    if (!c.shard_dir.empty()) cases.back()["shard_dir"] = c.shard_dir;
  }
  nlohmann::json out = {{"suite", r.name},
                        {"dir", r.dir},
                        {"runs", r.cases.size()},
                        {"failed", r.failures()},
                        {"interrupted", r.interrupted},
                        {"counts",
                         {{"pass", r.count("pass")},
                          {"fail", r.count("fail")},
                          {"error", r.count("error")},
                          {"unknown", r.count("unknown")},
                          {"interrupted", r.count("interrupted")},
                          {"flaky", r.count("flaky")},
                          {"skipped", r.count("skipped")}}},
                        {"wall_s", r.wall_s},
                        {"selection", r.selection},
                        {"notes", r.notes},
                        {"provenance", r.provenance.to_json()},
                        {"cases", cases}};
  if (!r.slurm.is_null()) out["slurm"] = r.slurm;
  if (!r.merge.is_null()) {
    out["merge"] = r.merge;
    out["counts"]["missing"] = r.missing.size();
  }
  return out;
}

}  // namespace fl::harness
