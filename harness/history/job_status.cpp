// The job-wide status (job_status.hpp): a fold over the history's events, then a view at a moment.
#include "harness/history/job_status.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/json_bounded.hpp"

namespace fl::harness {

namespace {

// Harness events after which the run is being torn down: the moment a finished run's view is of.
bool is_stop(const HistoryEvent& e, const nlohmann::json& d) {
  static const std::set<std::string> k = {"watchdog_stop",          "run_timeout", "interrupted",
                                          "teardown_after_failure", "run_ending",  "run_end"};
  return k.count(e.kind) > 0 || (e.kind == "rank_exit" && d.value("by_harness", false));
}

std::string stop_reason(const HistoryEvent& e, const nlohmann::json& d) {
  if (e.kind == "watchdog_stop") return d.value("reason", "the watchdog stopped it");
  if (e.kind == "run_timeout") return fmt::format("run timeout ({} s)", d.value("after_s", 0.0));
  if (e.kind == "interrupted")
    return "the harness got " + d.value("signal", std::string("a signal"));
  if (e.kind == "teardown_after_failure") {
    return fmt::format("rank {} failed; the survivors were killed", d.value("failed_rank", -1));
  }
  if (e.kind == "rank_exit") return "the harness stopped the ranks";
  return "";
}

bool ends_collective(const std::string& state) {
  return state != "scheduled" && state != "started";
}

double status_seconds(int64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

}  // namespace

int64_t JobStatus::max_step() const {
  int64_t m = -1;
  for (const auto& r : ranks) m = std::max(m, r.last_step);
  return m;
}

std::vector<int> JobStatus::alive() const {
  std::vector<int> out;
  for (const auto& r : ranks) {
    if (r.alive()) out.push_back(r.rank);
  }
  return out;
}

std::vector<int> JobStatus::missing() const {
  std::vector<int> out;
  for (const auto& r : ranks) {
    if (r.missing) out.push_back(r.rank);
  }
  return out;
}

RankStatus& JobStatusBuilder::rank(int r) {
  if (static_cast<int>(s_.ranks.size()) <= r) {
    const int from = static_cast<int>(s_.ranks.size());
    s_.ranks.resize(static_cast<size_t>(r) + 1);
    for (int i = from; i <= r; ++i) s_.ranks[static_cast<size_t>(i)].rank = i;
  }
  return s_.ranks[static_cast<size_t>(r)];
}

void JobStatusBuilder::add(const HistoryEvent& e) {
  // Called by the history's listener: a field of an unexpected type drops the event from the
  // view, never reaches the history's append.
  try {
    add_event(e);
  } catch (const nlohmann::json::exception&) {
  }
}

void JobStatusBuilder::add_event(const HistoryEvent& e) {
  // Called for every event under the history's lock: the kind decides before any parsing.
  static const std::set<std::string> kParsed = {
      "collective",  "fault_fired", "fault_injected",
      "run_start",   "rank_exit",   "watchdog_stop",
      "run_timeout", "interrupted", "teardown_after_failure"};
  std::lock_guard lock(mu_);
  last_ns_ = std::max(last_ns_, e.t_ns);
  nlohmann::json d = nlohmann::json::object();
  if (kParsed.count(e.kind)) {
    d = try_parse_json_bounded(e.data_json).value_or(nlohmann::json::object());
    if (!d.is_object()) d = nlohmann::json::object();
  }
  if (e.source == "harness") {
    add_harness(e, d);
    return;
  }
  if (e.source != "rank" || e.rank < 0 || e.rank > 1 << 20) return;
  // Once the harness stops the run the view is of that moment: what ranks say while they are torn
  // down (and what is merged from their files afterwards) does not move it.
  if (stopped_ns_ >= 0) return;
  RankStatus& r = rank(e.rank);
  r.launched = true;
  r.last_event_ns = std::max(r.last_event_ns, e.t_ns);
  if (e.kind == "step" && e.step > r.last_step) {
    r.last_step = e.step;
    r.coll_op.clear();  // a step ended: whatever it waited in is over
    r.coll_seq = -1;
  } else if (e.kind == "collective") {
    add_collective(r, e, d);
  } else if (e.kind == "fault_fired") {
    ++faults_[{"fault_fired", d.value("site", std::string("?")), d.value("action", std::string()),
               e.rank}];
  }
}

void JobStatusBuilder::add_harness(const HistoryEvent& e, const nlohmann::json& d) {
  if (e.kind == "run_start") {
    s_.run_id = d.value("run_id", std::string());
    s_.scenario = d.value("scenario", std::string());
    s_.world = d.value("ranks", 0);
    start_unix_ns_ = e.time_unix_ns - e.t_ns;
    if (s_.world > 0 && s_.world <= 1 << 20) rank(s_.world - 1);
  } else if (e.kind == "launch" && e.rank >= 0 && e.rank <= 1 << 20) {
    RankStatus& r = rank(e.rank);
    r.launched = true;
    r.exited = false;
    r.exit_class.clear();
    r.exit_ns = -1;
    r.coll_op.clear();  // a new incarnation waits in nothing yet
    r.last_event_ns = std::max(r.last_event_ns, e.t_ns);
  } else if (e.kind == "rank_exit" && e.rank >= 0 && e.rank <= 1 << 20) {
    RankStatus& r = rank(e.rank);
    r.exited = true;
    r.exit_ns = e.t_ns;
    r.exit_class = d.value("class", std::string("?"));  // its collective: cleared in at()
  } else if (e.kind == "fault_injected") {
    ++faults_[{"fault_injected", d.value("fault", std::string("?")), std::string(), e.rank}];
  }
  if (e.kind == "run_ending" || e.kind == "run_end") s_.running = false;
  if (stopped_ns_ < 0 && is_stop(e, d)) {
    stopped_ns_ = e.t_ns;
    s_.stop_reason = stop_reason(e, d);
  }
}

void JobStatusBuilder::add_collective(RankStatus& r, const HistoryEvent& e,
                                      const nlohmann::json& d) {
  const std::string op = d.value("op", std::string("?"));
  const std::string group = d.value("group", std::string());
  const std::string state = d.value("state", std::string("?"));
  const int64_t seq = d.value("seq", int64_t{-1});
  const int64_t in_flight_ms = d.value("in_flight_ms", int64_t{-1});
  int64_t since = in_flight_ms >= 0 ? e.t_ns - in_flight_ms * 1'000'000 : e.t_ns;
  // How an op ended comes after its stall report: it began when the report said.
  if (seq == r.last_coll_seq && group == r.last_coll_group && r.last_coll_since_ns >= 0) {
    since = std::min(since, r.last_coll_since_ns);
  }
  r.last_coll_op = op;
  r.last_coll_group = group;
  r.last_coll_state = state;
  r.last_coll_seq = seq;
  r.last_coll_since_ns = since;
  if (!ends_collective(state)) {
    r.coll_op = op;
    r.coll_group = group;
    r.coll_state = state;
    r.coll_seq = seq;
    r.coll_since_ns = since;
  } else if (r.coll_seq == seq && r.coll_group == group) {
    r.coll_op.clear();
    r.coll_seq = -1;
  }
}

JobStatus JobStatusBuilder::at(int64_t now_ns) const {
  std::lock_guard lock(mu_);
  JobStatus s = s_;
  s.at_ns = now_ns >= 0 ? now_ns : (stopped_ns_ >= 0 ? stopped_ns_ : last_ns_);
  for (auto& r : s.ranks) {
    if (r.exited && r.exit_ns > s.at_ns) r.exited = false;  // ended by the teardown after it
    if (r.exited) r.coll_op.clear();                        // an ended rank waits in nothing
  }
  // Missing: alive, silent for kMissingAfterNs, while a live peer was heard within it.
  auto quiet = [&](const RankStatus& r) { return s.at_ns - r.last_event_ns > kMissingAfterNs; };
  const bool peers_went_on = std::any_of(s.ranks.begin(), s.ranks.end(), [&](const auto& r) {
    return r.alive() && r.last_event_ns >= 0 && !quiet(r);
  });
  for (auto& r : s.ranks) r.missing = peers_went_on && r.alive() && quiet(r);
  for (const auto& [key, n] : faults_) {
    const auto& [kind, what, action, rank] = key;
    s.faults.push_back({kind, what, action, rank, n});
  }
  return s;
}

int64_t JobStatusBuilder::started_unix_ns() const {
  std::lock_guard lock(mu_);
  return start_unix_ns_;
}

JobStatus run_dir_status(const std::string& run_dir) {
  JobStatusBuilder b;
  for (const auto& e : read_history(run_dir + "/history.jsonl")) b.add(e);
  const auto v = read_json_file(run_dir + "/verdict.json").value_or(nlohmann::json());
  const bool running = v.is_object() && v.value("state", std::string()) == "running";
  JobStatus probe = b.at(-1);
  if (!running || !probe.running || b.started_unix_ns() == 0) {
    probe.running = false;  // its verdict is written, or its history ended
    return probe;
  }
  // Still going: the view is of now, on the harness's clock (its start on the wall clock).
  const int64_t unix_now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  return b.at(std::max<int64_t>(0, unix_now - b.started_unix_ns()));
}

nlohmann::json status_json(const JobStatus& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : s.ranks) {
    nlohmann::json j = {
        {"rank", r.rank},
        {"state", r.missing    ? "missing"
                  : r.exited   ? "exited"
                  : r.launched ? "alive"
                               : "not launched"},
        {"step", r.last_step},
        {"last_event_age_s", r.last_event_ns < 0
                                 ? nlohmann::json()
                                 : nlohmann::json(status_seconds(s.at_ns - r.last_event_ns))},
        {"collective", nullptr},
        {"last_collective", nullptr}};
    if (r.exited) j["exit_class"] = r.exit_class;
    if (!r.coll_op.empty()) {
      j["collective"] = {{"op", r.coll_op},
                         {"group", r.coll_group},
                         {"seq", r.coll_seq},
                         {"state", r.coll_state},
                         {"for_s", status_seconds(s.at_ns - r.coll_since_ns)}};
    }
    if (!r.last_coll_op.empty()) {
      j["last_collective"] = {{"op", r.last_coll_op},
                              {"group", r.last_coll_group},
                              {"seq", r.last_coll_seq},
                              {"state", r.last_coll_state},
                              {"age_s", status_seconds(s.at_ns - r.last_coll_since_ns)}};
    }
    ranks.push_back(std::move(j));
  }
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& f : s.faults) {
    faults.push_back({{"kind", f.kind},
                      {"what", f.what},
                      {"action", f.action},
                      {"rank", f.rank},
                      {"count", f.count}});
  }
  return {{"run_id", s.run_id},
          {"scenario", s.scenario},
          {"running", s.running},
          {"stop_reason", s.stop_reason},
          {"at_s", status_seconds(s.at_ns)},
          {"world", s.world},
          {"max_step", s.max_step()},
          {"alive", s.alive()},
          {"missing", s.missing()},
          {"ranks", ranks},
          {"faults", faults}};
}

namespace {

std::string collective_cell(const JobStatus& s, const RankStatus& r) {
  if (r.coll_op.empty()) return "-";
  return fmt::format("{} #{}{} for {:.1f} s", r.coll_op, r.coll_seq,
                     r.coll_group.empty() ? "" : " of " + r.coll_group,
                     status_seconds(s.at_ns - r.coll_since_ns));
}

std::string fault_line(const FaultCount& f) {
  const std::string where = f.rank >= 0 ? fmt::format(" on rank {}", f.rank) : "";
  if (f.kind == "fault_fired") {
    return fmt::format("{} {}{}: fired {} time{}", f.what, f.action, where, f.count,
                       f.count == 1 ? "" : "s");
  }
  return fmt::format("{}{}: injected{}", f.what, where,
                     f.count == 1 ? "" : fmt::format(" {} times", f.count));
}

}  // namespace

std::string status_text(const JobStatus& s) {
  std::string out = fmt::format(
      "run        {} ({})\nstate      {}\n", s.run_id.empty() ? "?" : s.run_id, s.scenario,
      s.running ? fmt::format("running, {:.1f} s in", status_seconds(s.at_ns))
                : fmt::format("ended; as of {:.1f} s{}", status_seconds(s.at_ns),
                              s.stop_reason.empty() ? "" : ", when " + s.stop_reason));
  out += fmt::format("ranks      {} of {} alive, highest step {}\n", s.alive().size(), s.world,
                     s.max_step());
  out += fmt::format("{:<6}{:<14}{:>6}  {:<12}{}\n", "rank", "state", "step", "last event",
                     "in collective");
  for (const auto& r : s.ranks) {
    const std::string state = r.missing    ? "MISSING"
                              : r.exited   ? "exited (" + r.exit_class + ")"
                              : r.launched ? "alive"
                                           : "not launched";
    const std::string age =
        r.last_event_ns < 0
            ? "-"
            : fmt::format("{:.1f} s ago", status_seconds(s.at_ns - r.last_event_ns));
    out += fmt::format("{:<6}{:<14}{:>6}  {:<12}{}\n", r.rank, state, r.last_step, age,
                       collective_cell(s, r));
  }
  const auto missing = s.missing();
  if (!missing.empty()) {
    out += fmt::format(
        "missing    rank{} {}: no event for over {:.0f} s while the others went on\n",
        missing.size() == 1 ? "" : "s", fmt::join(missing, ","), status_seconds(kMissingAfterNs));
  }
  if (s.faults.empty()) out += "faults     none fired\n";
  for (size_t i = 0; i < s.faults.size(); ++i) {
    out += fmt::format("{:<11}{}\n", i == 0 ? "faults" : "", fault_line(s.faults[i]));
  }
  return out;
}

}  // namespace fl::harness
