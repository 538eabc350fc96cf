#include "harness/run/live.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace fl::harness {

namespace {

std::string shorten(std::string s, size_t n = 160) {
  if (auto nl = s.find('\n'); nl != std::string::npos) s = s.substr(0, nl) + " ...";
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  return s;
}

std::string who(const HistoryEvent& e) {
  return e.rank >= 0 ? fmt::format("rank {:<4}", e.rank) : std::string("harness  ");
}

std::string stamp(const HistoryEvent& e) {
  return fmt::format("  {:>9}  ", fmt::format("+{:.3f}s", static_cast<double>(e.t_ns) / 1e9));
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  if (r.empty()) return "-";
  if (r.size() > 2 && r.back() - r.front() + 1 == static_cast<int>(r.size())) {
    return fmt::format("{}-{}", r.front(), r.back());
  }
  std::string out;
  for (size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + std::to_string(r[i]);
  return out;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  const std::string list = rank_list(ranks);
  return (list.find_first_of("-,") == std::string::npos ? "rank " : "ranks ") + list;
}

std::optional<std::string> live_line(const HistoryEvent& e, LiveState& state) {
  // Called for every event under the history's lock: the kind decides before any parsing.
  static const std::set<std::string> kNotable = {
      "fault_fired", "fault_injected",         "error",         "rank_exit",   "diagnosis",
      "restart",     "teardown_after_failure", "watchdog_stop", "run_timeout", "harness_error"};
  if (e.late || kNotable.count(e.kind) == 0) return std::nullopt;
  if (e.kind == "error" && (e.source != "rank" || state.errored.count(e.rank))) return std::nullopt;
  const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
  if (d.is_discarded() || !d.is_object()) return std::nullopt;
  const std::string head = stamp(e) + who(e) + "  ";
  if (e.source == "rank" && e.kind == "fault_fired") {
    return head + fmt::format("fault fired: {} (hit {}, {})", d.value("site", "?"),
                              d.value("hit", 0), d.value("action", "?"));
  }
  if (e.source == "harness" && e.kind == "fault_injected") {
    nlohmann::json rest = d;
    rest.erase("fault");
    return head + fmt::format("fault injected: {}{}", d.value("fault", "?"),
                              rest.empty() ? "" : " " + shorten(rest.dump(), 120));
  }
  if (e.source == "rank" && e.kind == "error") {
    if (!state.errored.insert(e.rank).second) return std::nullopt;
    return head + fmt::format("first error ({}): {}", d.value("class", "error"),
                              shorten(d.value("message", "")));
  }
  if (e.source == "harness" && e.kind == "rank_exit") {
    const std::string klass = d.value("class", "?");
    std::string how = klass == "ok" ? "exited cleanly"
                      : d.value("signaled", false)
                          ? fmt::format("ended by {} ({})", d.value("signal", "a signal"), klass)
                          : fmt::format("exited with status {} ({})", d.value("code", -1), klass);
    if (d.value("by_harness", false)) how += ", by the harness";
    return head + how;
  }
  if (e.kind == "diagnosis" && e.source.rfind("detector:", 0) == 0) {
    std::vector<int> ranks = d.value("ranks", std::vector<int>{});
    return stamp(e) +
           fmt::format("detector {} diagnosis: symptom {} on ranks {} (confidence {:.2f})",
                       d.value("detector", e.source.substr(9)), d.value("symptom", "unknown"),
                       rank_list(ranks), d.value("confidence", 0.0));
  }
  if (e.source == "harness" && e.kind == "restart") {
    return head + fmt::format("restart {} of every rank from {}", d.value("restart", 0),
                              d.value("from", "?"));
  }
  if (e.source == "harness" && e.kind == "teardown_after_failure") {
    return head + fmt::format("rank {} failed {:.0f} s ago: the survivors are killed",
                              d.value("failed_rank", -1), d.value("grace_s", 0.0));
  }
  if (e.source == "harness" && (e.kind == "watchdog_stop" || e.kind == "run_timeout")) {
    return head + (e.kind == "run_timeout"
                       ? fmt::format("run timeout after {} s: stopping", d.value("after_s", 0.0))
                       : fmt::format("stopping the run: {}", d.value("reason", "?")));
  }
  if (e.source == "harness" && e.kind == "harness_error") {
    return head + "harness error: " + shorten(d.value("message", ""));
  }
  return std::nullopt;
}

std::vector<std::string> detector_conclusions(const std::vector<HistoryEvent>& history) {
  int64_t first_fault = -1;
  for (const auto& e : history) {
    if ((e.kind == "fault_fired" || e.kind == "fault_injected") && !e.late) {
      if (first_fault < 0 || e.t_ns < first_fault) first_fault = e.t_ns;
    }
  }
  // One line per detector and symptom: the ranks it named, its first diagnosis, how many.
  struct Conclusion {
    std::string detector, symptom;
    std::vector<int> ranks;
    int64_t first_ns = -1;
    int count = 0;
  };
  std::vector<Conclusion> all;
  for (const auto& e : history) {
    if (e.kind != "diagnosis" || e.source.rfind("detector:", 0) != 0) continue;
    const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (d.is_discarded()) continue;
    const std::string det = d.value("detector", e.source.substr(9));
    const std::string sym = d.value("symptom", "unknown");
    auto it = std::find_if(all.begin(), all.end(),
                           [&](auto& c) { return c.detector == det && c.symptom == sym; });
    if (it == all.end()) it = all.insert(all.end(), {det, sym, {}, e.t_ns, 0});
    for (int r : d.value("ranks", std::vector<int>{})) it->ranks.push_back(r);
    ++it->count;
  }
  std::vector<std::string> out;
  for (const auto& c : all) {
    out.push_back(
        fmt::format("{:<10} symptom {:<7} {:<12} at {:.1f} s{}{}", c.detector, c.symptom,
                    c.ranks.empty() ? std::string("no rank named") : ranks_phrase(c.ranks),
                    static_cast<double>(c.first_ns) / 1e9,
                    first_fault >= 0 && c.first_ns >= first_fault
                        ? fmt::format(", {:.2f} s after the first fault",
                                      static_cast<double>(c.first_ns - first_fault) / 1e9)
                        : std::string(),
                    c.count > 1 ? fmt::format(" ({} diagnoses)", c.count) : std::string()));
  }
  return out;
}

}  // namespace fl::harness
