// A job-wide status at one moment, in the spirit of NCCL's RAS: which ranks are alive, each
// rank's last step, the collective each rank is in and for how long, who is missing (a live rank
// that stopped reporting while its peers went on) and the faults fired so far. Built from the
// history's events alone, so the same view serves a running run (`faultline run
// --metrics-port`'s /metrics, fed event by event) and a finished one (`faultline status`, fed
// the history file).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"

namespace fl::harness {

// A live rank with no event (heartbeats included: every second) for this long, while a peer sent
// one within it, is missing. The same 3 s the hang detector's --stale-s and the example Python
// detector use to call a process frozen.
inline constexpr int64_t kMissingAfterNs = 3'000'000'000;

struct RankStatus {
  int rank = -1;
  bool launched = false;
  bool exited = false;
  std::string exit_class;      // rank_exit's class once exited
  int64_t exit_ns = -1;        // when (harness time)
  int64_t last_step = -1;      // the highest step it reported
  int64_t last_event_ns = -1;  // its last event of any kind (harness time)
  // The collective it reported in flight and that has not ended since ("" : none). The time it
  // entered is the report's time less its in_flight_ms.
  std::string coll_op, coll_group, coll_state;
  int64_t coll_seq = -1;
  int64_t coll_since_ns = -1;
  // The last collective it reported at all (in flight or how it ended), and when that began.
  std::string last_coll_op, last_coll_group, last_coll_state;
  int64_t last_coll_seq = -1;
  int64_t last_coll_since_ns = -1;
  bool missing = false;
  bool alive() const { return launched && !exited; }
};

struct FaultCount {
  std::string kind;    // fault_fired (an in-process site) or fault_injected (out of process)
  std::string what;    // the site, or the out-of-process fault's kind
  std::string action;  // the site's action ("" for an out-of-process fault)
  int rank = -1;
  int count = 0;
};

struct JobStatus {
  std::string run_id, scenario;
  int world = 0;
  bool running = true;            // no run_ending yet
  std::string stop_reason;        // what stopped it (watchdog, timeout, signal), "" when it ran out
  int64_t at_ns = 0;              // the moment the view is of (harness time)
  std::vector<RankStatus> ranks;  // by rank
  std::vector<FaultCount> faults;
  int64_t max_step() const;
  std::vector<int> alive() const;
  std::vector<int> missing() const;
};

// Takes events one at a time (thread-safe: the history's listener feeds it while a scrape reads
// it) and answers the status at a moment.
class JobStatusBuilder {
 public:
  void add(const HistoryEvent& e);
  // At harness time `now_ns` (a running run), or, with -1, at the moment the run was stopped or
  // its last event (a finished run). `running` stays true until run_end or run_ending.
  JobStatus at(int64_t now_ns) const;
  // The run's start on the wall clock (from run_start), 0 before it.
  int64_t started_unix_ns() const;

 private:
  void add_event(const HistoryEvent& e);
  void add_harness(const HistoryEvent& e, const nlohmann::json& d);
  void add_collective(RankStatus& r, const HistoryEvent& e, const nlohmann::json& d);
  RankStatus& rank(int r);

  mutable std::mutex mu_;
  JobStatus s_;
  int64_t last_ns_ = 0;
  int64_t start_unix_ns_ = 0;
  int64_t stopped_ns_ = -1;  // the first watchdog_stop, run_timeout, interrupted or run_ending
  std::map<std::tuple<std::string, std::string, std::string, int>, int> faults_;
};

// The status of the run in RUN_DIR from its history file: at the current time while its verdict
// says `running`, else when it was stopped.
JobStatus run_dir_status(const std::string& run_dir);

nlohmann::json status_json(const JobStatus& s);
// The one-screen table `faultline status` prints.
std::string status_text(const JobStatus& s);

}  // namespace fl::harness
