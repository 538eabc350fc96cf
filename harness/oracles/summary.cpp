// The run summary the oracles judge: a history parsed once.
#include <algorithm>
#include <cmath>

#include "harness/oracles/oracle.hpp"

namespace fl::harness {

namespace {

// A step's collective times (`comm_ops_s`, seconds each); empty when the value has another shape.
std::vector<double> op_seconds(const nlohmann::json& v) {
  std::vector<double> out;
  if (!v.is_array()) return out;
  for (const auto& x : v) {
    if (!x.is_number()) return {};
    out.push_back(x.get<double>());
  }
  return out;
}

// The reference run of the baseline oracle, as the harness recorded it: its outcome and one row
// per rank and step [rank, step, interval_s, comm_s, loss or null, mem_current, comm_ops_s] (the
// last one since stop 54: older histories have six). Rows of another shape are left out.
void add_reference(RunSummary& f, const nlohmann::json& d) {
  auto& r = f.reference;
  r = {};
  r.present = true;
  r.outcome = d.value("outcome", "");
  r.explanation = d.value("explanation", "");
  r.run_dir = d.value("run_dir", "");
  r.ranks = d.value("ranks", 0);
  if (!d.contains("steps") || !d["steps"].is_array()) return;
  for (const auto& row : d["steps"]) {
    if (!row.is_array() || row.size() < 6 || row.size() > 7 || !row[0].is_number_integer() ||
        !row[1].is_number_integer() || !row[2].is_number() || !row[3].is_number() ||
        !row[5].is_number_integer()) {
      continue;
    }
    std::optional<double> loss;
    if (row[4].is_number() && std::isfinite(row[4].get<double>())) loss = row[4].get<double>();
    const double interval = row[2].get<double>();
    r.steps.push_back({row[0].get<int>(), 0, row[1].get<int64_t>(), loss, interval, interval,
                       row[3].get<double>(), row[5].get<int64_t>(), false, row[5].get<int64_t>(),
                       row.size() == 7 ? op_seconds(row[6]) : std::vector<double>{}});
  }
}

// A generation's tokens ([[int...] per request]); nullopt when the value has another shape.
std::optional<std::vector<std::vector<int32_t>>> token_rows(const nlohmann::json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<std::vector<int32_t>> rows;
  for (const auto& r : v) {
    if (!r.is_array()) return std::nullopt;
    auto& row = rows.emplace_back();
    for (const auto& t : r) {
      if (!t.is_number_integer()) return std::nullopt;
      row.push_back(t.get<int32_t>());
    }
  }
  return rows;
}

// The reference's generations: rows [rank, call, prompt_len, tokens]; rows of another shape are
// left out.
void add_reference_generations(RunSummary::Reference& r, const nlohmann::json& d) {
  if (!d.contains("generations") || !d["generations"].is_array()) return;
  for (const auto& row : d["generations"]) {
    if (!row.is_array() || row.size() != 4 || !row[0].is_number_integer() ||
        !row[1].is_number_integer() || !row[2].is_number_integer()) {
      continue;
    }
    auto tokens = token_rows(row[3]);
    if (!tokens) continue;
    r.generations.push_back(
        {row[0].get<int>(), 0, row[1].get<int64_t>(), row[2].get<int>(), std::move(*tokens)});
  }
}

void add_checked(RunSummary& f, const HistoryEvent& e, const nlohmann::json& d) {
  if (e.source == "harness") {
    if (e.kind == "run_start") f.world = d.value("ranks", 0);
    if (e.kind == "launch") {
      if (f.t_start < 0) f.t_start = e.t_ns;
      if (e.rank >= 0) f.launch_t[e.rank] = e.t_ns;
    }
    if (e.kind == "run_end") f.t_end = e.t_ns;
    if (e.kind == "restart" && d.value("ranks", 0) > 0 && d.value("ranks", 0) < f.world) {
      // A restart into a smaller world (recovery by shrinking): the ranks left out are no
      // longer part of the job.
      f.world = d.value("ranks", 0);
      std::erase_if(f.exits, [&](const RunSummary::Exit& x) { return x.rank >= f.world; });
    }
    if (e.kind == "run_timeout") f.run_timeout = true;
    if (e.kind == "interrupted" && f.interrupted.empty()) {
      f.interrupted = d.value("signal", "a signal");
      f.t_interrupted = e.t_ns;
    }
    if (e.kind == "oom_kill" && e.rank >= 0) f.oom_killed.insert(e.rank);
    if (e.kind == "fault_injected") f.t_fault_landed = std::max(f.t_fault_landed, e.t_ns);
    if (e.kind == "first_failure" && e.rank >= 0) {
      f.first_failure = {e.rank, e.t_ns, d.value("how", ""), d.value("message", "")};
    }
    if (e.kind == "rank_exit" && e.rank >= 0) {
      f.exits.push_back({e.rank, e.t_ns, d.value("class", ""), d.value("code", 0),
                         d.value("signaled", false), d.value("by_harness", false),
                         d.value("torn_down", false)});
      f.exit_t[e.rank] = e.t_ns;
    }
    if (e.kind == "output") f.lines.push_back({e.rank, e.t_ns, d.value("line", "")});
    if (e.kind == "baseline") {
      add_reference(f, d);
      add_reference_generations(f.reference, d);
    }
    return;
  }
  if (e.source != "rank") return;
  if (e.kind == "step") {
    std::optional<double> loss;
    if (d.contains("loss") && d["loss"].is_number()) {
      const double l = d["loss"].get<double>();
      if (std::isfinite(l)) loss = l;
    }
    const double st = d.value("step_time_s", 0.0);
    f.steps.push_back(
        {e.rank, e.t_ns, e.step, loss, st, d.value("interval_s", st), d.value("comm_s", 0.0),
         d.value("mem_current", int64_t{-1}),
         d.contains("skipped") && d["skipped"].is_boolean() && d["skipped"].get<bool>(),
         d.value("mem_peak", int64_t{-1}),
         d.contains("comm_ops_s") ? op_seconds(d["comm_ops_s"]) : std::vector<double>{}});
  } else if (e.kind == "error") {
    f.errors.push_back({e.rank, e.t_ns, e.step, d.value("class", ""), d.value("message", "")});
  } else if (e.kind == "collective" && d.value("state", "") == "timed-out") {
    f.timeouts.push_back({e.rank, e.t_ns, e.step, d.value("op", ""), d.value("group", ""),
                          d.value("state", ""), d.value("seq", int64_t{-1})});
  } else if (e.kind == "output") {
    f.outputs.push_back({e.rank, e.t_ns, d.value("group", "all"), d.value("digest", "")});
  } else if (e.kind == "generation" && d.contains("tokens")) {
    if (auto tokens = token_rows(d["tokens"])) {
      f.generations.push_back({e.rank, e.t_ns, d.value("call", int64_t{0}),
                               d.value("prompt_len", 0), std::move(*tokens)});
    }
  } else if (e.kind == "exit" && !f.exit_t.count(e.rank)) {
    // mpirun launcher: the worker's own exit event is the only per-rank end we see.
    const int code = d.value("exit_code", 0);
    f.exits.push_back({e.rank, e.t_ns, code == 0 ? "ok" : "error", code, false, false});
  }
}

}  // namespace

void add_event(RunSummary& f, const HistoryEvent& e) {
  f.t_last = e.t_ns;
  // A history read back passed the schema check (harness/history/event_schema.hpp); one built in
  // memory may not have: an event with a field of another type, or no rank, is left out.
  if (e.rank < -1) return;
  if (e.source == "rank" && e.rank >= 0 && !e.late) {  // heard from it then, as it happened
    auto& a = f.active_s[e.rank];
    const int64_t s = e.t_ns / 1'000'000'000;
    if (a.empty() || a.back() < s) a.push_back(s);
  }
  nlohmann::json d = nlohmann::json::parse(e.data_json, nullptr, false);
  if (d.is_discarded() || !d.is_object()) d = nlohmann::json::object();
  try {
    add_checked(f, e, d);
  } catch (const nlohmann::json::exception&) {
  }
}

void finish_summary(RunSummary& f) {
  if (f.world == 0) {
    for (auto& [r, t] : f.launch_t) f.world = std::max(f.world, r + 1);
  }
}

RunSummary summarize(const std::vector<HistoryEvent>& h) {
  RunSummary f;
  for (const auto& e : h) add_event(f, e);
  finish_summary(f);
  return f;
}

}  // namespace fl::harness
