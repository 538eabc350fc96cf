// The report of one run: what happened on every rank over time (steps, collectives stuck in
// flight, exits), when faults were active, where detectors spoke up and recovery acted; the
// per-step curves of loss, loss scale, step time and memory; the verdict and its evidence.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/history/history.hpp"
#include "harness/report/html.hpp"
#include "harness/report/report.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

// The most rank lanes a report draws (a world larger than any run here).
constexpr int kMaxLanes = 4096;

struct StepPoint {
  int64_t t, step;
  double loss, scale, step_time, mem;
  bool finite;
};
struct Span {
  int rank;  // -1: every lane
  int64_t t0, t1;
  std::string label, cls;
};
struct Mark {
  int rank;
  int64_t t, step;
  std::string label, cls;
};

struct Timeline {
  int64_t t0 = -1, t_end = 0;
  int world = 0;
  std::map<int, std::vector<StepPoint>> steps;
  std::vector<Span> stalls, faults;
  std::vector<Mark> marks;  // fault fired, diagnosis, action, exit
  std::vector<std::string> evidence;
  nlohmann::json start = nlohmann::json::object();  // run_start's data; {} in a history without it
};

int64_t step_at(const Timeline& tl, int rank, int64_t t) {
  int64_t s = -1;
  auto it = tl.steps.find(rank);
  if (it == tl.steps.end()) return s;
  for (auto& p : it->second) {
    if (p.t <= t) s = std::max(s, p.step);
  }
  return s;
}

// Builds a run's Timeline from its history: a stall report opens a span its completion closes,
// a fault window is closed by its heal; what never closed ends with the history.
class TimelineReader {
 public:
  void add(const HistoryEvent& e) {
    // Ranks index lanes and colours: one that is not -1 or a plausible rank is left out (the
    // history's schema check refuses them; a history from elsewhere may not have been checked).
    if (e.rank < -1 || e.rank >= kMaxLanes) return;
    tl_.t_end = std::max(tl_.t_end, e.t_ns);
    auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (d.is_discarded() || !d.is_object()) d = nlohmann::json::object();
    using Read = void (TimelineReader::*)(const HistoryEvent&, const nlohmann::json&);
    static const std::map<std::string, Read> kReaders = {
        {"run_start", &TimelineReader::run_start},
        {"launch", &TimelineReader::launch},
        {"step", &TimelineReader::step},
        {"collective", &TimelineReader::collective},
        {"fault_injected", &TimelineReader::fault_injected},
        {"fault_healed", &TimelineReader::fault_healed},
        {"fault_fired", &TimelineReader::fault_fired},
        {"diagnosis", &TimelineReader::diagnosis},
        {"control", &TimelineReader::action},
        {"restart", &TimelineReader::action},
        {"reshard", &TimelineReader::action},
        {"rank_exit", &TimelineReader::rank_exit},
        {"error", &TimelineReader::error},
    };
    auto it = kReaders.find(e.kind);
    if (it == kReaders.end()) return;
    try {
      (this->*(it->second))(e, d);
    } catch (const nlohmann::json::exception&) {
      // A field of another type than the harness writes: the event is left out.
    }
  }

  Timeline finish() {
    if (tl_.t0 < 0) tl_.t0 = 0;
    for (auto& s : tl_.stalls) {
      if (s.t1 < 0) s.t1 = tl_.t_end;
    }
    for (auto& f : tl_.faults) {
      if (f.t1 < 0) f.t1 = tl_.t_end;
    }
    for (auto& m : tl_.marks) {
      if (m.step < 0 && m.rank >= 0) m.step = step_at(tl_, m.rank, m.t);
    }
    return std::move(tl_);
  }

 private:
  void run_start(const HistoryEvent&, const nlohmann::json& d) {
    tl_.start = d;
    tl_.world = std::clamp(d.value("ranks", 0), 0, kMaxLanes);
  }

  void launch(const HistoryEvent& e, const nlohmann::json&) {
    if (e.rank < 0) return;
    if (tl_.t0 < 0) tl_.t0 = e.t_ns;
    tl_.world = std::max(tl_.world, e.rank + 1);
  }

  void step(const HistoryEvent& e, const nlohmann::json& d) {
    if (e.source != "rank" || e.rank < 0) return;
    const bool finite = d.contains("loss") && d["loss"].is_number();
    tl_.steps[e.rank].push_back({e.t_ns, e.step, finite ? d["loss"].get<double>() : 0.0,
                                 d.value("loss_scale", 0.0), d.value("step_time_s", 0.0),
                                 d.value("mem_current", 0.0), finite});
  }

  void collective(const HistoryEvent& e, const nlohmann::json& d) {
    if (e.source != "rank") return;
    const auto key = std::make_tuple(e.rank, d.value("group", ""), d.value("seq", int64_t{-1}));
    const std::string state = d.value("state", "");
    if (d.contains("in_flight_ms")) {
      const int64_t t0 = e.t_ns - static_cast<int64_t>(d.value("in_flight_ms", 0.0) * 1e6);
      open_stalls_[key] = tl_.stalls.size();
      tl_.stalls.push_back({e.rank, t0, -1,
                            fmt::format("{} on {} seq {} in flight", d.value("op", ""),
                                        std::get<1>(key), std::get<2>(key)),
                            "stall"});
    } else if (auto it = open_stalls_.find(key); it != open_stalls_.end()) {
      Span& s = tl_.stalls[it->second];
      s.t1 = e.t_ns;
      s.cls = "stall " + state;
      s.label += ", " + state;
      open_stalls_.erase(it);
    }
  }

  void fault_injected(const HistoryEvent& e, const nlohmann::json& d) {
    if (std::set<std::string>{"signal", "restart", "file", "args", "env"}.count(
            d.value("fault", ""))) {
      // One-shot faults: an instant, not a window.
      tl_.marks.push_back({e.rank, e.t_ns, d.value("at_step", int64_t{-1}), "injected: " + d.dump(),
                           "fault-fired"});
      return;
    }
    const std::string what = d.value("fault", "fault");
    open_faults_[what + std::to_string(e.rank)] = tl_.faults.size();
    tl_.faults.push_back({e.rank, e.t_ns, -1, "injected: " + d.dump(), "fault-window"});
  }

  void fault_healed(const HistoryEvent& e, const nlohmann::json& d) {
    const std::string what = d.value("fault", "fault");
    for (auto it = open_faults_.begin(); it != open_faults_.end(); ++it) {
      if (it->first.rfind(what, 0) == 0) {
        tl_.faults[it->second].t1 = e.t_ns;
        open_faults_.erase(it);
        break;
      }
    }
  }

  void fault_fired(const HistoryEvent& e, const nlohmann::json& d) {
    tl_.marks.push_back(
        {e.rank, e.t_ns, e.step,
         fmt::format("fault fired at {}: {}", d.value("site", ""), d.value("action", "")),
         "fault-fired"});
  }

  void diagnosis(const HistoryEvent& e, const nlohmann::json& d) {
    std::vector<int> ranks;
    if (d.contains("ranks") && d["ranks"].is_array()) ranks = d["ranks"].get<std::vector<int>>();
    if (ranks.empty()) ranks.push_back(-1);
    for (int r : ranks) {
      if (r < -1 || r >= kMaxLanes) continue;
      tl_.marks.push_back({r, e.t_ns, e.step,
                           fmt::format("{} diagnosed {}: {}", d.value("detector", "?"),
                                       d.value("symptom", "?"), d.value("evidence", "")),
                           "diagnosis"});
    }
  }

  void action(const HistoryEvent& e, const nlohmann::json& d) {
    tl_.marks.push_back({-1, e.t_ns, -1, e.kind + ": " + d.dump(), "action"});
  }

  void rank_exit(const HistoryEvent& e, const nlohmann::json& d) {
    if (e.rank < 0) return;
    tl_.marks.push_back(
        {e.rank, e.t_ns, -1,
         fmt::format("rank {} exit: {} (code {}){}", e.rank, d.value("class", ""),
                     d.value("code", 0), d.value("by_harness", false) ? ", by the harness" : ""),
         "exit " + d.value("class", std::string())});
  }

  void error(const HistoryEvent& e, const nlohmann::json& d) {
    if (e.source != "rank") return;
    tl_.evidence.push_back(fmt::format("rank {}: {}", e.rank, d.value("message", "")));
  }

  Timeline tl_;
  std::map<std::tuple<int, std::string, int64_t>, size_t> open_stalls_;
  std::map<std::string, size_t> open_faults_;
};

Timeline read_timeline(const std::vector<HistoryEvent>& h) {
  TimelineReader r;
  for (const auto& e : h) r.add(e);
  return r.finish();
}

constexpr double kLeft = 70, kWidth = 900, kLane = 26;

// Where the timeline draws: x of a harness time, y of a rank's lane.
struct TimelineGeometry {
  int64_t t0;
  double span;  // ns, at least 1
  int lanes;
  double top = 24, axis_y;

  explicit TimelineGeometry(const Timeline& tl)
      : t0(tl.t0),
        span(std::max<double>(1, tl.t_end - tl.t0)),
        lanes(std::max(1, tl.world)),
        axis_y(top + lanes * kLane) {}
  double x(int64_t t) const { return kLeft + (static_cast<double>(t - t0) / span) * kWidth; }
  double lane_y(int r) const { return top + r * kLane; }
};

// A lane per rank and the seconds axis under them.
std::string lanes_svg(const TimelineGeometry& g) {
  std::string s;
  for (int r = 0; r < g.lanes; ++r) {
    s += fmt::format(
        "<g class=\"lane-row\" data-rank=\"{}\"><rect class=\"lane{}\" x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\"/><text x=\"6\" y=\"{}\">rank {}</text></g>\n",
        r, r % 2 ? " alt" : "", kLeft, g.lane_y(r), kWidth, kLane, html::num(g.lane_y(r) + 17), r);
  }
  const double secs = g.span / 1e9;
  const double step = secs <= 5 ? 0.5 : secs <= 20 ? 2 : secs <= 60 ? 5 : secs <= 300 ? 30 : 60;
  for (double t = 0; t <= secs + 1e-9; t += step) {
    const double xx = g.x(g.t0 + static_cast<int64_t>(t * 1e9));
    s += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}s</text>\n",
        html::num(xx), g.top, g.axis_y, html::num(g.axis_y + 14), html::num(t, 1));
  }
  return s;
}

// Fault windows (over their rank's lane, or every lane), stalls and steps.
std::string spans_svg(const Timeline& tl, const TimelineGeometry& g) {
  std::string s;
  for (const auto& f : tl.faults) {
    const bool one = f.rank >= 0 && f.rank < g.lanes;
    s += fmt::format(
        "<rect class=\"fault-window\" data-rank=\"{}\" data-info=\"{}\" x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\"><title>{}</title></rect>\n",
        f.rank, html_escape(f.label), html::num(g.x(f.t0)), one ? g.lane_y(f.rank) : g.top,
        html::num(std::max(2.0, g.x(f.t1) - g.x(f.t0))), one ? kLane : g.lanes * kLane,
        html_escape(f.label));
  }
  for (const auto& st : tl.stalls) {
    if (st.rank < 0 || st.rank >= g.lanes) continue;
    s += fmt::format(
        "<rect class=\"{}\" data-rank=\"{}\" data-info=\"rank {}: {}\" x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"8\"><title>rank {}: {}</title></rect>\n",
        html_escape(st.cls), st.rank, st.rank, html_escape(st.label), html::num(g.x(st.t0)),
        html::num(g.lane_y(st.rank) + 16), html::num(std::max(1.5, g.x(st.t1) - g.x(st.t0))),
        st.rank, html_escape(st.label));
  }
  for (const auto& [r, pts] : tl.steps) {
    if (r < 0 || r >= g.lanes) continue;
    for (const auto& p : pts) {
      s += fmt::format(
          "<line class=\"step\" data-rank=\"{0}\" data-step=\"{1}\" x1=\"{2}\" x2=\"{2}\" "
          "y1=\"{3}\" "
          "y2=\"{4}\"><title>rank {0} step {1}</title></line>\n",
          r, p.step, html::num(g.x(p.t)), html::num(g.lane_y(r) + 3), html::num(g.lane_y(r) + 14));
    }
  }
  return s;
}

// An action is a line across every lane; a diagnosis, a fault that fired and an exit are a
// triangle, a diamond and a cross on their rank's lane.
std::string mark_svg(const Mark& m, const TimelineGeometry& g) {
  const double xx = g.x(m.t);
  const std::string info = html_escape(m.label);
  if (m.cls == "action") {
    return fmt::format(
        "<line class=\"action\" data-info=\"{0}\" x1=\"{1}\" x2=\"{1}\" y1=\"{2}\" y2=\"{3}\">"
        "<title>{0}</title></line>\n",
        info, html::num(xx), g.top - 6, g.axis_y);
  }
  const int r = m.rank >= 0 && m.rank < g.lanes ? m.rank : 0;
  const double y = g.lane_y(r);
  if (m.cls == "diagnosis") {
    return fmt::format(
        "<path class=\"diagnosis\" data-rank=\"{}\" data-step=\"{}\" data-info=\"{}\" "
        "d=\"M{} {} l6 -10 l-12 0 z\"><title>{}</title></path>\n",
        m.rank, m.step, info, html::num(xx), html::num(y + 12), info);
  }
  if (m.cls == "fault-fired") {
    return fmt::format(
        "<path class=\"fault-fired\" data-rank=\"{}\" data-step=\"{}\" data-info=\"{}\" "
        "d=\"M{} {} l5 6 l-5 6 l-5 -6 z\"><title>{}</title></path>\n",
        m.rank, m.step, info, html::num(xx), html::num(y + 7), info);
  }
  return fmt::format(
      "<path class=\"{}\" data-rank=\"{}\" data-info=\"{}\" d=\"M{} {} l8 8 m0 -8 l-8 8\">"
      "<title>{}</title></path>\n",
      html_escape(m.cls), m.rank, info, html::num(xx - 4), html::num(y + 9), info);
}

std::string timeline_svg(const Timeline& tl) {
  const TimelineGeometry g(tl);
  const double height = g.top + g.lanes * kLane + 28;
  std::string s =
      fmt::format("<svg id=\"timeline\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n",
                  kLeft + kWidth + 20, height, kLeft + kWidth + 20, height);
  s += lanes_svg(g);
  s += spans_svg(tl, g);
  for (const auto& m : tl.marks) s += mark_svg(m, g);
  s += "</svg>\n";
  return s;
}

const char* kPalette[] = {"#1565c0", "#c62828", "#2e7d32", "#ef6c00",
                          "#6a1b9a", "#00838f", "#5d4037", "#ad1457"};

// A rank's colour; anything but a rank (never drawn: read_timeline keeps ranks >= 0) is grey.
const char* palette(int rank) {
  return rank >= 0 ? kPalette[rank % 8] : "#757575";
}

std::string chart_svg(const Timeline& tl, const std::string& metric, const std::string& title) {
  double lo = INFINITY, hi = -INFINITY;
  int64_t smax = 0;
  auto value = [&](const StepPoint& p) -> std::optional<double> {
    if (metric == "loss") return p.finite ? std::optional<double>(p.loss) : std::nullopt;
    if (metric == "loss_scale") return p.scale;
    if (metric == "step_time_s") return p.step_time;
    return p.mem / 1048576.0;
  };
  for (auto& [r, pts] : tl.steps) {
    for (auto& p : pts) {
      smax = std::max(smax, p.step);
      if (auto v = value(p)) {
        lo = std::min(lo, *v);
        hi = std::max(hi, *v);
      }
    }
  }
  const double w = 420, h = 150, l = 50, b = 20;
  std::string s = fmt::format(
      "<svg class=\"chart\" data-metric=\"{}\" width=\"{}\" height=\"{}\"><text x=\"{}\" "
      "y=\"14\">{}</text>\n",
      metric, w + l + 10, h + b + 20, l, html_escape(title));
  if (!std::isfinite(lo)) return s + "<text x=\"60\" y=\"60\">no data</text></svg>\n";
  if (hi - lo < 1e-12) hi = lo + 1;
  auto X = [&](int64_t st) { return l + (smax > 0 ? static_cast<double>(st) / smax : 0) * w; };
  auto Y = [&](double v) { return 20 + (1 - (v - lo) / (hi - lo)) * h; };
  s += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"20\" y2=\"{1}\"/>"
      "<line class=\"axis\" x1=\"{0}\" x2=\"{2}\" y1=\"{1}\" y2=\"{1}\"/>"
      "<text x=\"2\" y=\"26\">{3}</text><text x=\"2\" y=\"{1}\">{4}</text>"
      "<text x=\"{2}\" y=\"{5}\" text-anchor=\"end\">step {6}</text>\n",
      l, 20 + h, l + w, html::num(hi, 3), html::num(lo, 3), 20 + h + 16, smax);
  for (auto& [r, pts] : tl.steps) {
    // One line per incarnation: a restart goes back to an earlier step.
    std::vector<std::string> paths(1);
    int64_t prev = -1;
    for (auto& p : pts) {
      if (p.step <= prev && !paths.back().empty()) paths.emplace_back();
      prev = p.step;
      if (auto v = value(p)) {
        paths.back() += fmt::format("{},{} ", html::num(X(p.step)), html::num(Y(*v)));
      }
    }
    for (size_t i = 0; i < paths.size(); ++i) {
      s += fmt::format(
          "<polyline class=\"series\" data-rank=\"{}\" stroke=\"{}\"{} points=\"{}\">"
          "<title>rank {}{}</title></polyline>\n",
          r, palette(r), i > 0 ? " stroke-dasharray=\"4 2\"" : "", paths[i], r,
          i > 0 ? fmt::format(" after restart {}", i) : "");
    }
  }
  return s + "</svg>\n";
}

}  // namespace

std::string run_report_html(const std::string& run_dir, const std::string& out_dir) {
  const auto h = read_history(run_dir + "/history.jsonl");
  if (h.empty()) {
    raise<Error>(
        "{}/history.jsonl holds no events (a run that never started, or a history emptied since): "
        "nothing to report",
        run_dir);
  }
  const Timeline tl = read_timeline(h);
  Verdict v;
  try {
    v = judge_run_dir(run_dir);
  } catch (const std::exception& e) {
    v.outcome = "unknown";
    v.explanation = std::string("cannot judge: ") + e.what();
  }
  const auto rel = [&](const std::string& p) {
    return fs::relative(fs::path(p), fs::path(out_dir)).string();
  };
  std::string body = fmt::format(
      "<h1>{} <span class=\"badge {}\">{}</span></h1>\n<div class=\"meta\">run {} &middot; {} "
      "ranks &middot; oracle {}{} &middot; {:.1f} s</div>\n",
      html_escape(tl.start.value("scenario", fs::path(run_dir).filename().string())), v.outcome,
      v.outcome, html_escape(tl.start.value("run_id", "")), tl.world, html_escape(v.oracle),
      v.symptom.empty() ? "" : ", symptom " + html_escape(v.symptom), (tl.t_end - tl.t0) / 1e9);
  body += "<h2>Verdict</h2><div class=\"evidence\" id=\"verdict\">" + html_escape(v.explanation) +
          "</div>\n";
  if (!tl.evidence.empty()) {
    body += "<h2>Evidence</h2><div class=\"evidence\" id=\"evidence\">";
    for (auto& l : tl.evidence) body += html_escape(l) + "\n";
    body += "</div>\n";
  }
  body +=
      "<h2>Timeline</h2><div class=\"legend\"><span style=\"background:#4a78c2;color:#fff\">"
      "step</span><span style=\"background:#f0a040\">collective in flight</span>"
      "<span style=\"background:#fbd3d2\">fault active</span><span style=\"background:#b71c1c;"
      "color:#fff\">fault fired</span><span style=\"background:#6a1b9a;color:#fff\">"
      "diagnosis</span><span style=\"border-bottom:2px dashed #00838f\">control / restart"
      "</span><span>&times; exit</span> <span id=\"status\"></span></div>\n";
  body += timeline_svg(tl) + "<div id=\"detail\">click a marker for its details</div>\n";
  body += "<h2>Per step</h2>\n" + chart_svg(tl, "loss", "loss") +
          chart_svg(tl, "loss_scale", "loss scale") +
          chart_svg(tl, "step_time_s", "step time (s)") +
          chart_svg(tl, "mem_current", "memory allocated (MiB)");
  body +=
      "<h2>Ranks</h2><table><tr><th>rank</th><th>steps</th><th>last step</th><th>log</th>"
      "<th>events</th></tr>\n";
  for (int r = 0; r < tl.world; ++r) {
    auto it = tl.steps.find(r);
    const size_t n = it == tl.steps.end() ? 0 : it->second.size();
    const int64_t last = n ? it->second.back().step : -1;
    const std::string rd = fmt::format("{}/ranks/rank{}", run_dir, r);
    body += fmt::format(
        "<tr><td>{0}</td><td>{1}</td><td>{2}</td><td><a href=\"{3}\">output.log</a></td>"
        "<td><a href=\"{4}\">events.jsonl</a></td></tr>\n",
        r, n, last, html_escape(rel(rd + "/output.log")), html_escape(rel(rd + "/events.jsonl")));
  }
  body += fmt::format(
      "</table><p class=\"meta\">Files: <a href=\"{}\">history.jsonl</a>, "
      "<a href=\"{}\">scenario.yaml</a>, <a href=\"{}\">verdict.json</a></p>\n",
      html_escape(rel(run_dir + "/history.jsonl")), html_escape(rel(run_dir + "/scenario.yaml")),
      html_escape(rel(run_dir + "/verdict.json")));
  return html::page("faultline run " + tl.start.value("run_id", ""), body);
}

}  // namespace fl::harness
