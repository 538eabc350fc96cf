// The ground truth of a campaign run, from what the run recorded: for every fault the generator
// drew, whether it fired and whether it manifested (campaign.hpp defines both). A pure function
// of the run directory and the run's manifest entry, so it can be computed again at any time.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/json_bounded.hpp"
#include "harness/campaign/campaign.hpp"
#include "harness/model/scenario.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness::campaign {

namespace {

struct Firing {
  int count = 0;
  int64_t first_t_ns = -1;
  std::set<int> ranks;
  std::string failed;  // fault_failed: why
};

nlohmann::json data_of(const HistoryEvent& e) {
  auto d = nlohmann::json::parse(e.data_json, nullptr, false);
  return d.is_object() ? d : nlohmann::json::object();
}

// A plan fault fires at its sites (the ranks' fault_fired events); any other kind is injected by
// the harness (fault_injected with the kind's key). No two faults of a run share either.
Firing firing_of(const DrawnFault& f, const std::vector<HistoryEvent>& history) {
  Firing out;
  for (const auto& e : history) {
    const bool plan = f.kind == "plan" && e.source == "rank" && e.kind == "fault_fired";
    const bool oop = f.kind != "plan" && e.source == "harness" &&
                     (e.kind == "fault_injected" || e.kind == "fault_failed");
    if (!plan && !oop) continue;
    const auto d = data_of(e);
    if (plan) {
      const std::string site = d.value("site", "");
      if (std::find(f.sites.begin(), f.sites.end(), site) == f.sites.end()) continue;
    } else if (d.value("fault", "") != f.kind) {
      continue;
    } else if (e.kind == "fault_failed") {
      out.failed = d.dump();
      continue;
    }
    ++out.count;
    if (out.first_t_ns < 0) out.first_t_ns = e.t_ns;
    if (e.rank >= 0) out.ranks.insert(e.rank);
  }
  return out;
}

std::string flow(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

nlohmann::json fault_truth(const DrawnFault& f, const std::vector<HistoryEvent>& history,
                           const RunSummary& summary) {
  const Firing fired = firing_of(f, history);
  nlohmann::json j = {
      {"template", f.templ},
      {"kind", f.kind},
      {"fault", flow(f.item)},
      {"expect", flow(f.expect)},
      {"cascade_of", f.cascade_of < 0 ? nlohmann::json() : nlohmann::json(f.cascade_of)},
      {"fired", fired.count > 0},
      {"fired_count", fired.count},
      {"fired_ranks", std::vector<int>(fired.ranks.begin(), fired.ranks.end())}};
  if (!fired.failed.empty()) j["failed"] = fired.failed;
  const double fired_s =
      fired.first_t_ns < 0 ? -1 : (fired.first_t_ns - std::max<int64_t>(0, summary.t_start)) / 1e9;
  j["first_fired_s"] = fired_s;
  Verdict v;
  try {
    v = judge(parse_expect_text(flow(f.expect)), summary);
  } catch (const std::exception& e) {
    v.outcome = "unknown";
    v.explanation = e.what();
  }
  j["oracle"] = v.oracle;
  j["oracle_outcome"] = v.outcome;
  j["oracle_manifested_s"] = v.manifested_s;
  // The oracle's finding must not come before the fault fired (a 1 ms slack for the order in
  // which the harness stamps events from different sources).
  const bool after = v.manifested_s < 0 || v.manifested_s + 1e-3 >= fired_s;
  j["manifested"] = fired.count > 0 && v.outcome == "pass" && after;
  j["why"] = fired.count == 0 ? "never fired"
             : v.outcome != "pass"
                 ? fmt::format("fired; its oracle says {}: {}", v.outcome, v.explanation)
             : !after ? "fired after the oracle's finding"
                      : fmt::format("fired; {}", v.explanation);
  return j;
}

}  // namespace

nlohmann::json run_truth(const GeneratedRun& run, const std::string& run_dir) {
  nlohmann::json j = run.manifest();
  j["run_dir"] = run_dir;
  const auto v = read_json_file(run_dir + "/verdict.json").value_or(nlohmann::json());
  j["outcome"] = v.is_object() ? v.value("outcome", "unknown") : "error";
  if (v.is_object() && v.contains("harness_error")) j["outcome"] = "error";
  nlohmann::json faults = nlohmann::json::array();
  std::vector<HistoryEvent> history;
  try {
    history = history_with_rank_files(run_dir).events;
  } catch (const std::exception& e) {
    j["history_error"] = e.what();
  }
  const RunSummary summary = summarize(history);
  for (const auto& f : run.faults) faults.push_back(fault_truth(f, history, summary));
  j["faults"] = faults;
  // A decoy slows without failing: it fires, and nothing should manifest.
  nlohmann::json decoys = nlohmann::json::array();
  for (const auto& d : run.decoy_faults) {
    const Firing fired = firing_of(d, history);
    decoys.push_back({{"template", d.templ},
                      {"fault", flow(d.item)},
                      {"fired", fired.count > 0},
                      {"fired_count", fired.count}});
  }
  j["decoy_faults"] = decoys;
  return j;
}

}  // namespace fl::harness::campaign
