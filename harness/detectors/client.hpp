// The client every baseline detector and recovery tool is built on: it follows a run's merged
// event stream over the control plane (Observe, replayed from the start, without ground truth),
// posts diagnoses (Report) and acts on the run (Control). A tool sees only what a production
// monitor could: rank telemetry, rank output, launches and exits. Which fault was injected, when
// and where is withheld.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/event.hpp"
#include "base/stats.hpp"

namespace fl::detect {

// A tool's view of one run event: the envelope of the run's event (base/event.hpp, fl::Event)
// with its data parsed, built from it by view_of alone.
struct Event {
  int rank = -1;
  std::string source;  // rank, harness, detector:<name>, control
  std::string kind;
  int64_t step = -1;
  int64_t t_ns = 0;  // harness time (ns since the run started)
  nlohmann::json data;
};

// The view of `e`: its data parsed (data that is not JSON becomes {}).
Event view_of(const fl::Event& e);

struct Finding {
  std::string symptom;  // taxonomy id, or "unknown"
  int stage = 0;        // 0: the symptom's stage
  std::vector<int> ranks;
  int64_t step = -1;
  double confidence = 0.5;
  std::string evidence;
  std::string key;  // findings with the same key are posted once ("" : symptom + ranks)
};

// The stage a symptom id belongs to ("4.11" -> 4; "unknown" -> 0).
int stage_of(const std::string& symptom);

// What a monitor can know about a run from its stream: the workload, each rank's liveness,
// progress and exits. Tools feed it every event.
struct RunView {
  struct Rank {
    bool hello = false, exited = false;
    std::string exit_class;  // ok, error, crash, signal
    bool exit_by_harness = false;
    int64_t last_beat_ns = -1;  // heartbeat or any event of the rank
    int64_t last_step = -1, last_step_ns = -1, first_step_ns = -1;
    nlohmann::json layout;
  };
  std::string workload;  // train or infer, from the launch command
  int world = 0;
  std::map<int, Rank> ranks;
  int64_t first_launch_ns = -1;
  int incarnation = 0;  // restarts seen
  bool ending = false;  // run_ending seen

  void update(const Event& e);
  bool any_alive() const;
  int64_t max_step() const;
  // The ranks that took part in the current incarnation and have not exited.
  std::vector<int> alive() const;
};

class Tool {
 public:
  // The tool's name comes from FAULTLINE_TOOL_NAME (else `default_name`), the control plane's
  // address from `addr` (else FAULTLINE_CONTROL_ADDR); throws std::runtime_error without one.
  // Every call presents the run's secret: FAULTLINE_CONTROL_SECRET, else the control.secret
  // beside a unix:RUN_DIR/control.sock address (base/control_auth.hpp).
  explicit Tool(const std::string& default_name, const std::string& addr = "");
  ~Tool();

  // Follows the run until `run_ending` or the end of the stream. `on_event` sees every event in
  // history order (the view is updated first); `on_tick` runs about every `tick` with the
  // estimated current harness time, also when no event comes.
  void run(const std::function<void(const Event&)>& on_event,
           const std::function<void(int64_t now_ns)>& on_tick = {},
           std::chrono::milliseconds tick = std::chrono::milliseconds(100));

  // Posts a finding once per key; returns false for a repeat or when the post failed.
  bool report(const Finding& f);
  // One Control action; `reply` gets the harness's message.
  bool control(const std::string& action, int rank, const std::vector<std::string>& args, int dp,
               std::string* reply, const std::string& checkpoint = "");

  const std::string& name() const { return name_; }
  const RunView& view() const { return view_; }
  int64_t now_ns() const;
  int reports() const { return reports_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  RunView view_;
  std::set<std::string> posted_;
  int reports_ = 0;
  int64_t last_event_ns_ = 0;
  std::chrono::steady_clock::time_point last_event_at_;
};

// Median of `v` (0 for an empty one).
using fl::stats::median;

}  // namespace fl::detect
