// Recovery scores from a run's history: did the job come back and finish, how long it took, how
// many steps were computed twice, the useful steps per second against the fault-free run, and
// whether the final parameters equal the fault-free run's.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "harness/history/history.hpp"
#include "harness/score/score.hpp"

namespace fl::harness {

namespace {

struct Timeline {
  int64_t t_launch = -1, t_inject = -1, t_end = 0, t_first_restart = -1, t_act = -1;
  int restarts = 0;
  int64_t max_step_before = -1;  // before the first restart
  int64_t first_step_after = -1, t_first_step_after = -1;
  std::set<int64_t> steps;                // distinct steps finished (any incarnation)
  std::map<int, std::string> last_class;  // per rank, in the last incarnation
  std::map<int, std::string> digest;      // parameter digest per rank, last incarnation
  bool timed_out = false;
};

Timeline read_timeline(const std::string& run_dir) {
  Timeline t;
  for (const auto& e : read_history(run_dir + "/history.jsonl")) {
    t.t_end = std::max(t.t_end, e.t_ns);
    const auto d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (e.kind == "launch" && t.t_launch < 0) t.t_launch = e.t_ns;
    if ((e.kind == "fault_fired" || e.kind == "fault_injected") && t.t_inject < 0)
      t.t_inject = e.t_ns;
    if (e.kind == "run_timeout") t.timed_out = true;
    if (e.kind == "control" && !d.is_discarded() && d.value("action", "") == "restart_job" &&
        d.value("ok", false) && t.t_act < 0) {
      t.t_act = e.t_ns;
    }
    if (e.kind == "restart") {
      ++t.restarts;
      if (t.t_first_restart < 0) t.t_first_restart = e.t_ns;
      t.last_class.clear();
      t.digest.clear();
    }
    if (e.source == "rank" && e.kind == "step") {
      t.steps.insert(e.step);
      if (t.t_first_restart < 0) {
        t.max_step_before = std::max(t.max_step_before, e.step);
      } else if (t.first_step_after < 0) {
        t.first_step_after = e.step;
        t.t_first_step_after = e.t_ns;
      }
    }
    if (e.kind == "rank_exit" && !d.is_discarded()) t.last_class[e.rank] = d.value("class", "");
    if (e.source == "rank" && e.kind == "output" && !d.is_discarded() &&
        d.value("what", "") == "parameters") {
      t.digest[e.rank] = d.value("digest", "");
    }
  }
  if (t.t_launch < 0) t.t_launch = 0;
  if (t.t_inject < 0) t.t_inject = t.t_launch;
  return t;
}

}  // namespace

RecoveryScore score_recovery(const std::string& run_dir, const std::string& reference_dir) {
  RecoveryScore s;
  s.run_dir = run_dir;
  s.reference_dir = reference_dir;
  s.scenario = std::filesystem::path(run_dir).filename().string();
  const Timeline t = read_timeline(run_dir);
  s.restarts = t.restarts;
  s.recovered = !t.timed_out && !t.last_class.empty() &&
                std::all_of(t.last_class.begin(), t.last_class.end(),
                            [](auto& kv) { return kv.second == "ok"; });
  if (t.t_act >= 0) s.time_to_act_s = (t.t_act - t.t_inject) / 1e9;
  if (t.t_first_step_after >= 0) s.time_to_recover_s = (t.t_first_step_after - t.t_inject) / 1e9;
  if (t.first_step_after >= 0)
    s.steps_lost = std::max<int64_t>(0, t.max_step_before + 1 - t.first_step_after);
  s.steps_done = static_cast<int64_t>(t.steps.size());
  const double wall = (t.t_end - t.t_launch) / 1e9;
  s.goodput = wall > 0 ? s.steps_done / wall : 0;
  if (auto it = t.digest.find(0); it != t.digest.end()) s.final_digest = it->second;
  if (!reference_dir.empty()) {
    const Timeline r = read_timeline(reference_dir);
    const double rwall = (r.t_end - r.t_launch) / 1e9;
    s.reference_goodput = rwall > 0 ? r.steps.size() / rwall : 0;
    if (auto it = r.digest.find(0); it != r.digest.end()) s.reference_digest = it->second;
    s.final_state_equal =
        s.recovered && !s.final_digest.empty() && s.final_digest == s.reference_digest;
  }
  if (!s.recovered) {
    s.note = t.timed_out ? "the run timed out" : "a rank of the last incarnation did not finish";
  } else if (t.restarts == 0) {
    s.note = "finished without a restart";
  }
  return s;
}

}  // namespace fl::harness
