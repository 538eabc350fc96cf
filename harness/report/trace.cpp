// A run's timeline in the Trace Event Format (the JSON that chrome://tracing and ui.perfetto.dev
// open): one process per rank plus one for the harness, steps (with the parts the worker timed:
// forward, backward, gradients, optimizer), the run's sections (setup, eval, checkpoint) and
// collectives in flight as slices, loss / loss scale / memory as counters, faults, diagnoses,
// control actions and exits as instants. Time is the harness clock of the history (microseconds
// since the run started).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/private_dir.hpp"
#include "harness/history/history.hpp"
#include "harness/report/report.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

constexpr int kHarnessPid = 0;  // ranks are pid rank + 1 (pid 0 would be the swapper)
constexpr int kMainTid = 0, kCommTid = 1, kEventTid = 2, kSectionTid = 3;

double us(int64_t t_ns) {
  return static_cast<double>(t_ns) / 1e3;
}

int pid_of(int rank) {
  return rank >= 0 ? rank + 1 : kHarnessPid;
}

nlohmann::json data_of(const HistoryEvent& e) {
  auto d = nlohmann::json::parse(e.data_json, nullptr, false);
  return d.is_object() ? d : nlohmann::json::object();
}

// Only the members of `d` that a trace viewer shows usefully (numbers, strings, booleans).
nlohmann::json args_of(const nlohmann::json& d) {
  nlohmann::json a = nlohmann::json::object();
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (it->is_primitive() && !it->is_null()) a[it.key()] = *it;
  }
  return a;
}

class TraceBuilder {
 public:
  void metadata(int pid, const std::string& name, int sort_index) {
    add({{"name", "process_name"},
         {"ph", "M"},
         {"pid", pid},
         {"tid", kMainTid},
         {"args", {{"name", name}}}});
    add({{"name", "process_sort_index"},
         {"ph", "M"},
         {"pid", pid},
         {"tid", kMainTid},
         {"args", {{"sort_index", sort_index}}}});
    for (auto [tid, tname] : {std::pair{kMainTid, "steps"}, std::pair{kCommTid, "collectives"},
                              std::pair{kEventTid, "events"}, std::pair{kSectionTid, "phases"}}) {
      add({{"name", "thread_name"},
           {"ph", "M"},
           {"pid", pid},
           {"tid", tid},
           {"args", {{"name", tname}}}});
    }
  }
  void slice(int pid, int tid, const std::string& name, const std::string& cat, int64_t t0_ns,
             int64_t t1_ns, nlohmann::json args) {
    add({{"name", name},
         {"cat", cat},
         {"ph", "X"},
         {"pid", pid},
         {"tid", tid},
         {"ts", us(t0_ns)},
         {"dur", us(std::max<int64_t>(0, t1_ns - t0_ns))},
         {"args", std::move(args)}});
  }
  // scope: "t" (thread), "p" (process) or "g" (the whole trace).
  void instant(int pid, int tid, const std::string& name, const std::string& cat, int64_t t_ns,
               const char* scope, nlohmann::json args) {
    add({{"name", name},
         {"cat", cat},
         {"ph", "i"},
         {"s", scope},
         {"pid", pid},
         {"tid", tid},
         {"ts", us(t_ns)},
         {"args", std::move(args)}});
  }
  void counter(int pid, const std::string& name, int64_t t_ns, double value) {
    add({{"name", name},
         {"ph", "C"},
         {"pid", pid},
         {"tid", kMainTid},
         {"ts", us(t_ns)},
         {"args", {{"value", value}}}});
  }
  nlohmann::json take() { return std::move(events_); }

 private:
  void add(nlohmann::json e) { events_.push_back(std::move(e)); }
  nlohmann::json events_ = nlohmann::json::array();
};

std::string describe_fault(const nlohmann::json& d) {
  std::string what = d.value("fault", d.value("site", std::string("fault")));
  if (d.contains("signal")) what += " " + d["signal"].get<std::string>();
  if (d.contains("action") && d["action"].is_string()) what += " " + d["action"].get<std::string>();
  return what;
}

using CollKey = std::tuple<int, std::string, int64_t>;  // rank, group, seq
using InFlight = std::map<CollKey, std::pair<int64_t, nlohmann::json>>;

int64_t ns(double s) {
  return static_cast<int64_t>(s * 1e9);
}

// The parts of a step the worker timed (`phases`: [name, start_s, dur_s] from the step's start:
// forward, backward, gradients, optimizer), as slices inside the step's [t0, t1].
void add_step_phases(TraceBuilder& tb, int pid, const nlohmann::json& phases, int64_t t0,
                     int64_t t1) {
  if (!phases.is_array()) return;
  for (const auto& p : phases) {
    if (!p.is_array() || p.size() != 3 || !p[0].is_string() || !p[1].is_number() ||
        !p[2].is_number()) {
      continue;
    }
    const int64_t a = std::clamp(t0 + ns(p[1].get<double>()), t0, t1);
    const int64_t b = std::clamp(a + ns(p[2].get<double>()), a, t1);
    tb.slice(pid, kMainTid, p[0].get<std::string>(), "phase", a, b, nlohmann::json::object());
  }
}

// A rank's step: a slice as long as the step took, and its loss, loss scale and memory counters.
// It ends when the step event arrived, or, when the worker says how long after the step it
// reported it (`reported_after_s`: an evaluation in between), that much earlier. Events come in
// batches, so the first of a batch arrives later than it happened: a step that would begin
// before the rank's previous step ended is moved to begin there, as slices on one track must not
// overlap (a CI run under load had a step's window take in its neighbour's parts).
void add_step(TraceBuilder& tb, std::map<int, int64_t>& step_end, const HistoryEvent& e,
              const nlohmann::json& d) {
  const int pid = pid_of(e.rank);
  const double dur_s = d.value("step_time_s", 0.0);
  int64_t t1 = e.t_ns - ns(std::max(0.0, d.value("reported_after_s", 0.0)));
  int64_t t0 = t1 - ns(dur_s);
  int64_t& previous_end = step_end[pid];
  if (t0 < previous_end) {
    t1 += previous_end - t0;
    t0 = previous_end;
  }
  previous_end = t1;
  tb.slice(pid, kMainTid, fmt::format("step {}", e.step), "step", t0, t1, args_of(d));
  if (d.contains("phases")) add_step_phases(tb, pid, d["phases"], t0, t1);
  if (d.contains("loss") && d["loss"].is_number()) {
    tb.counter(pid, "loss", e.t_ns, d["loss"].get<double>());
  }
  if (d.contains("loss_scale") && d["loss_scale"].is_number()) {
    tb.counter(pid, "loss scale", e.t_ns, d["loss_scale"].get<double>());
  }
  if (d.contains("mem_current") && d["mem_current"].is_number()) {
    tb.counter(pid, "memory MiB", e.t_ns, d["mem_current"].get<double>() / (1 << 20));
  }
}

// A collective: held while it is reported in flight, a slice from then (or from its completion)
// once it completed.
void add_collective(TraceBuilder& tb, InFlight& in_flight, const HistoryEvent& e,
                    const nlohmann::json& d) {
  const int pid = pid_of(e.rank);
  const CollKey key{e.rank, d.value("group", ""), d.value("seq", int64_t{-1})};
  const std::string name = fmt::format("{} {} #{}", d.value("op", std::string("op")),
                                       std::get<1>(key), std::get<2>(key));
  if (d.contains("in_flight_ms") && d["in_flight_ms"].is_number() &&
      d["in_flight_ms"].get<double>() >= 0) {
    const int64_t t0 = e.t_ns - static_cast<int64_t>(d["in_flight_ms"].get<double>() * 1e6);
    in_flight.try_emplace(key, t0, args_of(d));
  } else {
    auto it = in_flight.find(key);
    const int64_t t0 = it != in_flight.end() ? it->second.first : e.t_ns;
    if (it != in_flight.end()) in_flight.erase(it);
    tb.slice(pid, kCommTid, name, "collective", t0, e.t_ns, args_of(d));
  }
}

using SectionKey = std::pair<int, std::string>;  // rank, section name
using OpenSections = std::map<SectionKey, std::pair<int64_t, nlohmann::json>>;

// A section (setup, eval, checkpoint: fl-train's, or a probed job's fl_probe_section) is a
// slice from its begin to its end on the rank's `phases` track.
void add_section(TraceBuilder& tb, OpenSections& open, const HistoryEvent& e,
                 const nlohmann::json& d) {
  const SectionKey key{e.rank, d.value("name", std::string("section"))};
  if (d.value("state", "") == "begin") {
    open[key] = {e.t_ns, args_of(d)};
    return;
  }
  auto it = open.find(key);
  if (it == open.end()) return;  // an end without its begin: nothing to draw from
  tb.slice(pid_of(e.rank), kSectionTid, key.second, "section", it->second.first, e.t_ns,
           it->second.second);
  open.erase(it);
}

// Faults, diagnoses, harness actions, exits and launches: instants.
void add_instant(TraceBuilder& tb, const HistoryEvent& e, const nlohmann::json& d) {
  const int pid = pid_of(e.rank);
  if (e.kind == "fault_injected" || e.kind == "fault_fired" || e.kind == "fault_healed") {
    tb.instant(pid, kEventTid, fmt::format("{}: {}", e.kind, describe_fault(d)), "fault", e.t_ns,
               e.rank >= 0 ? "p" : "g", args_of(d));
  } else if (e.kind == "diagnosis") {
    tb.instant(kHarnessPid, kEventTid,
               fmt::format("{} diagnosis {}", e.source, d.value("symptom", std::string("?"))),
               "diagnosis", e.t_ns, "g", args_of(d));
  } else if (e.kind == "control" || e.kind == "restart" || e.kind == "watchdog_stop" ||
             e.kind == "run_timeout") {
    tb.instant(kHarnessPid, kEventTid, e.kind, "harness", e.t_ns, "g", args_of(d));
  } else if (e.kind == "rank_exit" || e.kind == "exit" || e.kind == "error" ||
             e.kind == "oom_kill") {
    tb.instant(pid, kEventTid, e.kind, "exit", e.t_ns, "p", args_of(d));
  } else if (e.kind == "launch" && e.rank >= 0) {
    tb.instant(pid, kEventTid, "launch", "harness", e.t_ns, "p",
               {{"pid", d.value("pid", 0)}, {"launcher", d.value("launcher", std::string())}});
  }
}

}  // namespace

nlohmann::json run_trace(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "history.jsonl").string();
  if (!fs::exists(path)) {
    raise("{} is not a run directory: it has no history.jsonl", run_dir);
  }
  const auto events = read_history(path);
  TraceBuilder tb;
  std::set<int> ranks;
  int world = 0;
  nlohmann::json start = nlohmann::json::object();
  int64_t t_end = 0;
  for (const auto& e : events) {
    t_end = std::max(t_end, e.t_ns);
    if (e.rank >= 0) ranks.insert(e.rank);
    if (e.kind == "run_start") {
      start = data_of(e);
      world = start.value("ranks", 0);
    }
  }
  for (int r = 0; r < world; ++r) ranks.insert(r);

  tb.metadata(kHarnessPid, "harness", 0);
  for (int r : ranks) tb.metadata(pid_of(r), fmt::format("rank {}", r), r + 1);

  InFlight in_flight;
  OpenSections sections;
  std::map<int, int64_t> step_end;  // pid -> where its last step slice ended
  int64_t run_t0 = -1;
  for (const auto& e : events) {
    const auto d = data_of(e);
    if (e.kind == "run_start") {
      run_t0 = e.t_ns;
    } else if (e.kind == "run_end") {
      tb.slice(kHarnessPid, kMainTid, start.value("scenario", std::string("run")), "run",
               std::max<int64_t>(0, run_t0), e.t_ns, args_of(d));
    } else if (e.kind == "step" && e.source == "rank") {
      add_step(tb, step_end, e, d);
    } else if (e.kind == "collective" && e.source == "rank") {
      add_collective(tb, in_flight, e, d);
    } else if (e.kind == "section" && e.source == "rank") {
      add_section(tb, sections, e, d);
    } else {
      add_instant(tb, e, d);
    }
  }
  // Collectives still in flight when the history ends: open until its last event.
  for (auto& [key, v] : in_flight) {
    tb.slice(pid_of(std::get<0>(key)), kCommTid,
             fmt::format("{} {} #{} (never completed)", v.second.value("op", std::string("op")),
                         std::get<1>(key), std::get<2>(key)),
             "collective", v.first, t_end, v.second);
  }
  // Sections that never ended (a rank stopped inside one): open until the history ends.
  for (auto& [key, v] : sections) {
    tb.slice(pid_of(key.first), kSectionTid, key.second + " (never ended)", "section", v.first,
             t_end, v.second);
  }
  nlohmann::json trace;
  trace["traceEvents"] = tb.take();
  trace["displayTimeUnit"] = "ms";
  trace["otherData"] = {{"run_id", start.value("run_id", std::string())},
                        {"scenario", start.value("scenario", std::string())},
                        {"clock", "harness time since the run started"}};
  return trace;
}

std::string write_trace(const std::string& run_dir, const std::string& out) {
  const std::string path = out.empty() ? (fs::path(run_dir) / "trace.json").string() : out;
  const auto trace = run_trace(run_dir);
  // A temporary of a fresh name, created exclusively: never a symlink planted at NAME.tmp.
  write_file_atomic(path,
                    trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return path;
}

}  // namespace fl::harness
