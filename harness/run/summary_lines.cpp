// What fired and what ran, from the history (harness/run/summary_lines.hpp).
#include "harness/run/summary_lines.hpp"

#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "harness/run/live.hpp"
#include "injector/plan.hpp"

namespace fl::harness {

PlanReport plan_report(const std::vector<std::string>& plans,
                       const std::vector<HistoryEvent>& history) {
  PlanReport out;
  for (const auto& text : plans) {
    std::set<std::string> sites;
    try {
      for (const auto& e : fault::parse_plan(text, "plan").entries) sites.insert(e.site);
    } catch (const std::exception&) {
    }
    std::map<std::string, std::set<int>> ranks_by_site;
    int64_t fired = 0;
    for (const auto& e : history) {
      if (e.source != "rank" || e.kind != "fault_fired") continue;
      const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
      if (d.is_discarded() || !d.is_object() || !d.contains("site") || !d["site"].is_string()) {
        continue;
      }
      const std::string site = d["site"].get<std::string>();
      if (!sites.count(site)) continue;
      ++fired;
      ranks_by_site[site].insert(e.rank);
    }
    if (fired == 0) {
      out.lines.push_back(fmt::format("plan '{}': armed, never fired", text));
      out.warnings.push_back(fmt::format(
          "plan '{}' was armed but never fired: no rank reached {} under its filters, so it "
          "caused nothing in this run",
          text, sites.size() == 1 ? "its site" : "its sites"));
      continue;
    }
    std::vector<std::string> where;
    for (auto& [site, ranks] : ranks_by_site) {
      where.push_back(fmt::format("{} on {}", site,
                                  ranks_phrase(std::vector<int>(ranks.begin(), ranks.end()))));
    }
    out.lines.push_back(fmt::format("plan '{}': fired {} time{} ({})", text, fired,
                                    fired == 1 ? "" : "s", fmt::join(where, "; ")));
  }
  return out;
}

std::optional<std::string> reported_layout(const std::vector<HistoryEvent>& history) {
  std::map<int, std::string> by_rank;  // the last layout each rank reported
  for (const auto& e : history) {
    if (e.source != "rank" || e.kind != "layout" || e.rank < 0) continue;
    const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (d.is_discarded() || !d.is_object()) continue;
    auto num = [&](const char* k) {
      return d.contains(k) && d[k].is_number_integer() ? d[k].get<int64_t>() : int64_t{-1};
    };
    by_rank[e.rank] = fmt::format("dp {} x tp {} x pp {}, zero {}", num("dp"), num("tp"), num("pp"),
                                  std::max<int64_t>(0, num("zero")));
  }
  if (by_rank.empty()) return std::nullopt;
  std::map<std::string, std::vector<int>> ranks_by_layout;
  for (auto& [r, l] : by_rank) ranks_by_layout[l].push_back(r);
  if (ranks_by_layout.size() == 1) {
    return fmt::format("{} rank{} = {}", by_rank.size(), by_rank.size() == 1 ? "" : "s",
                       ranks_by_layout.begin()->first);
  }
  std::vector<std::string> parts;
  for (auto& [l, ranks] : ranks_by_layout) {
    parts.push_back(fmt::format("{}: {}", ranks_phrase(ranks), l));
  }
  return fmt::format("ranks disagree: {}", fmt::join(parts, "; "));
}

}  // namespace fl::harness
