#include "harness/score/offline.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/private_dir.hpp"
#include "base/stats.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/event_loop.hpp"
#include "harness/run/runner.hpp"
#include "harness/score/dataset.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// What the replay does not feed again: the live detectors' own traces (the replayed tools post
// their own) and the live control plane's bookkeeping.
bool replayed(const HistoryEvent& e) {
  static const std::set<std::string> skip = {"diagnosis", "tool_start", "tool_exit",
                                             "observer_dropped"};
  return !skip.count(e.kind);
}

// Live, the harness starts its tools just before the first launch.
bool tools_start_before(const HistoryEvent& e) {
  return e.kind == "tool_start" || e.kind == "launch";
}

// One replay: a history behind a control plane, the tools as processes of a supervisor.
class Replay {
 public:
  Replay(const std::string& dst, double speed)
      : dst_(dst),
        speed_(speed),
        secret_(make_control_secret()),
        hist_(dst + "/history.jsonl"),
        ctl_(
            hist_, [](const ControlAction& a) { return refuse(a); }, secret_),
        sup_(
            loop_.io(),
            [this](int, const std::string& n, const std::string&, const std::string& l) {
              on_line(n, l);
            },
            [this](const ExitInfo& x) { on_exit(x); }) {
    hist_.set_clock_rate(0, 0);  // still until the tools listen
    ctl_.start("unix:" + dst_ + "/control.sock");
  }

  void start_tools(const std::vector<ToolCommand>& tools);
  void wait_for_listeners(size_t n, int64_t at_ns);
  void feed(const HistoryEvent& e, bool paced);
  void drain(Clock::time_point until);
  History& history() { return hist_; }
  Controller& controller() { return ctl_; }
  bool listened = true;

 private:
  static ControlResult refuse(const ControlAction& a) {
    return {false,
            fmt::format("offline replay: '{}' needs a live run (the ranks are recorded)", a.action),
            {}};
  }
  void on_line(const std::string& name, const std::string& line) {
    if (name.rfind("tool:", 0) != 0) return;
    std::ofstream(fmt::format("{}/tools/{}.log", dst_, name.substr(5)), std::ios::app)
        << line << "\n";
  }
  void on_exit(const ExitInfo& x) {
    auto it = pids_.find(x.pid);
    if (it == pids_.end()) return;
    nlohmann::json d = exit_fields(x);
    d["tool"] = it->second;
    hist_.harness("tool_exit", d);
    pids_.erase(it);
  }
  void wait_until(int64_t t_ns);

  std::string dst_;
  double speed_;
  std::string secret_;
  History hist_;
  Controller ctl_;
  EventLoop loop_;
  Supervisor sup_;
  std::map<pid_t, std::string> pids_;
};

void Replay::start_tools(const std::vector<ToolCommand>& tools) {
  fs::create_directories(dst_ + "/tools");
  const std::string addr = "unix:" + dst_ + "/control.sock";
  for (const auto& t : tools) {
    ProcessSpec p;
    p.name = "tool:" + t.name;
    p.argv = t.argv;
    p.cwd = dst_ + "/tools";
    for (auto& [k, v] : base_env()) {
      if (k != "FAULTLINE_CLOCK_RATE") p.env.push_back(k + "=" + v);  // the replay's, below
    }
    for (auto& kv : tool_env(t, addr, secret_, dst_)) p.env.push_back(kv);
    p.env.push_back(fmt::format("FAULTLINE_CLOCK_RATE={}", speed_));
    const pid_t pid = sup_.spawn(p);
    pids_[pid] = t.name;
    hist_.harness("tool_start",
                  {{"tool", t.name}, {"argv", t.argv}, {"pid", pid}, {"recovery", false}});
  }
}

void Replay::wait_for_listeners(size_t n, int64_t at_ns) {
  // Live, the tools subscribe while the ranks start; here nothing waits for them, so the clock
  // starts only once every tool follows the stream (or after 10 s, noted).
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (hist_.listener_count() < n && Clock::now() < deadline && !pids_.empty()) {
    loop_.run_for(std::chrono::milliseconds(5));
  }
  listened = hist_.listener_count() >= n;
  hist_.set_clock_rate(speed_, at_ns);
}

void Replay::wait_until(int64_t t_ns) {
  for (int64_t now = hist_.now_ns(); now < t_ns; now = hist_.now_ns()) {
    const auto wall = std::chrono::nanoseconds(static_cast<int64_t>((t_ns - now) / speed_));
    const auto step = std::min<std::chrono::nanoseconds>(wall, std::chrono::milliseconds(2));
    const auto before = Clock::now();
    loop_.run_for(std::chrono::duration_cast<std::chrono::milliseconds>(step));
    if (Clock::now() - before < step) std::this_thread::sleep_for(step);
  }
}

void Replay::feed(const HistoryEvent& e, bool paced) {
  if (paced) wait_until(e.t_ns);
  hist_.append_at(e, e.t_ns);
}

void Replay::drain(Clock::time_point until) {
  while (!pids_.empty() && Clock::now() < until) loop_.run_for(std::chrono::milliseconds(20));
  for (auto& [pid, name] : pids_) sup_.mark_by_harness(pid);
  sup_.teardown(std::chrono::milliseconds(500));
  hist_.flush();
}

void prepare_dir(const std::string& src, const std::string& dst) {
  if (fs::exists(dst)) raise<ConfigError>("{}: exists; a replay writes a new directory", dst);
  fs::create_directories(dst);
  fs::permissions(dst, fs::perms::owner_all);
  fs::copy_file(src + "/scenario.yaml", dst + "/scenario.yaml");
}

}  // namespace

ReplayStats replay_run(const std::string& src, const std::string& dst,
                       const std::vector<ToolCommand>& tools, double speed) {
  if (!(speed > 0)) raise<ConfigError>("--speed {}: must be above 0", speed);
  const auto events = read_history(src + "/history.jsonl");
  prepare_dir(src, dst);
  const auto t0 = Clock::now();
  Replay r(dst, speed);
  ReplayStats st;
  size_t i = 0;
  int64_t last = 0;
  for (; i < events.size() && !tools_start_before(events[i]); ++i) {
    if (!replayed(events[i])) continue;
    r.feed(events[i], false);
    last = events[i].t_ns;
    ++st.events;
  }
  r.start_tools(tools);
  r.wait_for_listeners(tools.size(), last);
  st.tools_listened = r.listened;
  Clock::time_point drain_until{};
  for (; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!replayed(e)) continue;
    r.feed(e, true);
    ++st.events;
    st.recorded_s = std::max(st.recorded_s, e.t_ns / 1e9);
    if (e.kind == "run_ending" && drain_until == Clock::time_point{}) {
      // Live, the tools' last words come in real time: so do they here.
      r.history().set_clock_rate(1, e.t_ns);
      drain_until = Clock::now() + std::chrono::seconds(3);
    }
  }
  if (drain_until == Clock::time_point{}) {
    r.history().set_clock_rate(1);
    r.history().harness("run_ending", {{"tools", tools.size()}, {"wait_s", 3}});
    drain_until = Clock::now() + std::chrono::seconds(3);
  }
  r.drain(drain_until);
  r.controller().shutdown();
  st.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

}  // namespace fl::harness

namespace fl::harness {

namespace {

std::vector<std::string> replay_sources(const std::vector<std::string>& paths) {
  std::vector<std::string> dirs;
  for (const auto& p : paths) {
    auto more = fs::exists(fs::path(p) / "manifest.json") ? dataset_runs(p) : collect_run_dirs({p});
    dirs.insert(dirs.end(), more.begin(), more.end());
  }
  return dirs;
}

// The fields of two scoring records that must agree ("latency_s" carries the tool's reaction
// time, stretched by the replay's speed: reported, not compared).
std::string record_difference(const nlohmann::json& live, const nlohmann::json& replay) {
  std::string out;
  for (auto& [k, v] : live.items()) {
    if (k == "latency_s") continue;
    if (replay.value(k, nlohmann::json()) != v) {
      out += fmt::format(" {}: live {} replay {};", k, v.dump(),
                         replay.value(k, nlohmann::json()).dump());
    }
  }
  return out;
}

struct LiveCheck {
  int records = 0, differing = 0, skipped = 0;
  std::vector<double> latency_delta_s;
  std::string report;
};

void check_against_live(const std::string& live_dir, const RunTruth& replay,
                        const std::vector<ToolCommand>& tools, LiveCheck& c) {
  const RunTruth live = load_run_truth(live_dir);
  for (const auto& t : tools) {
    if (std::find(live.detectors.begin(), live.detectors.end(), t.name) == live.detectors.end()) {
      ++c.skipped;  // the detector did not run live: nothing to compare with
      continue;
    }
    const auto a = scoring_record(live, t.name), b = scoring_record(replay, t.name);
    ++c.records;
    const std::string diff = record_difference(a, b);
    if (!diff.empty()) {
      ++c.differing;
      c.report +=
          fmt::format("DIFFERS {} {}:{}\n", fs::path(live_dir).filename().string(), t.name, diff);
    }
    if (a["latency_s"].is_number() && b["latency_s"].is_number()) {
      c.latency_delta_s.push_back(b["latency_s"].get<double>() - a["latency_s"].get<double>());
    }
  }
}

std::string check_summary(const LiveCheck& c) {
  std::vector<double> abs;
  for (double d : c.latency_delta_s) abs.push_back(std::fabs(d));
  return fmt::format(
      "{}replay vs live: {} scoring records, {} differ{}; latency replay - live over {} detected "
      "runs: median |d| {:.3f} s, max |d| {:.3f} s\n",
      c.report, c.records, c.differing,
      c.skipped
          ? fmt::format(" ({} detector/run pairs without a live run of that detector)", c.skipped)
          : "",
      abs.size(), abs.empty() ? 0.0 : fl::stats::median(abs),
      abs.empty() ? 0.0 : *std::max_element(abs.begin(), abs.end()));
}

}  // namespace

nlohmann::json scoring_record(const RunTruth& r, const std::string& detector) {
  const auto scores = score_detectors({r}, {0, 1});
  for (const auto& s : scores) {
    if (s.detector != detector) continue;
    nlohmann::json j = {{"class", r.cls}, {"alarms", 0}};
    for (const auto& d : r.diagnoses)
      j["alarms"] = j["alarms"].get<int>() + (d.detector == detector);
    if (s.outcomes.empty()) return j;
    const RunOutcome& o = s.outcomes[0];
    j["detected"] = o.detected;
    j["false_alarm"] = o.false_alarm;
    j["latency_s"] = o.detected ? nlohmann::json(o.latency_s) : nlohmann::json(nullptr);
    j["symptom_right"] = s.symptom.hit;
    j["stage_right"] = s.stage.hit;
    j["top1_right"] = s.top1.hit;
    j["jaccard"] = s.jaccard_sum;
    return j;
  }
  return {{"class", r.cls},
          {"alarms", 0},
          {"detected", false},
          {"false_alarm", false},
          {"latency_s", nullptr}};
}

int score_offline(const OfflineOptions& o) {
  const auto tools = resolve_tools(o.detectors, "");
  const auto sources = replay_sources(o.paths);
  make_private_dir(o.results_dir, "--replays", false);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  const std::string dir =
      make_unique_dir(o.results_dir, fmt::format("{:%Y%m%d-%H%M%S}-offline", fmt::localtime(now)));
  std::vector<RunTruth> runs;
  LiveCheck check;
  double wall = 0, recorded = 0;
  for (const auto& src : sources) {
    const std::string dst = dir + "/runs/" + fs::path(src).filename().string();
    fs::create_directories(dir + "/runs");
    const ReplayStats st = replay_run(src, dst, tools, o.speed);
    wall += st.wall_s;
    recorded += st.recorded_s;
    if (!st.tools_listened)
      std::fprintf(stderr, "faultline: %s: a tool never subscribed\n", src.c_str());
    runs.push_back(load_run_truth(dst));
    if (o.check_live) check_against_live(src, runs.back(), tools, check);
  }
  const auto scores = score_detectors(runs);
  std::printf("%s", scores_table(scores, o.markdown).c_str());
  std::printf("%s", breakdown_tables(scores, o.markdown).c_str());
  if (o.compare.size() == 2) {
    std::printf(
        "%s",
        comparison_text(compare_detectors(scores, o.compare[0], o.compare[1]), o.markdown).c_str());
  }
  std::printf("replayed %zu runs (%.1f recorded s) in %.1f s of wall time at speed %g: %s\n",
              runs.size(), recorded, wall, o.speed, dir.c_str());
  nlohmann::json j = {{"runs", runs.size()},
                      {"speed", o.speed},
                      {"recorded_s", recorded},
                      {"wall_s", wall},
                      {"detectors", scores_json(scores)}};
  write_atomic(dir + "/leaderboard.json", j.dump(2) + "\n");
  if (!o.json_path.empty()) write_atomic(o.json_path, scores_json(scores).dump(2) + "\n");
  if (!o.check_live) return 0;
  std::printf("%s", check_summary(check).c_str());
  return check.differing == 0 ? 0 : 1;
}

}  // namespace fl::harness
