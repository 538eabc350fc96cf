// fl-detect-comm: a collective watchdog plus a flight-recorder analysis. Ranks report a
// collective that stays in flight (stall report), and every timeout or failure. Per (group, seq)
// the analyser compares what each member called: a member that never arrived is the missing
// rank; members that called different ops, counts or dtypes at the same seq are a mismatch.
// Rendezvous and store errors of the ranks are communication-setup findings; the words of a
// message are read with its paths and the run's own name masked (comm_words.hpp).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/detectors/comm_words.hpp"
#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

namespace {

struct Call {
  std::string op, dtype;
  int64_t count = 0;
  int64_t since_ns = 0;
};

// Members of `group` that share `rank`'s position, from the ranks' layout events.
std::vector<int> members(const RunView& v, const std::string& group, int rank) {
  std::vector<int> out;
  auto it = v.ranks.find(rank);
  if (group == "world" || it == v.ranks.end() || it->second.layout.is_null()) {
    for (auto& [r, st] : v.ranks) out.push_back(r);
    return out;
  }
  const auto& me = it->second.layout;
  // dp: same tp and pp position; tp: same dp and pp; pp: same dp and tp.
  std::vector<std::string> same = group == "dp"   ? std::vector<std::string>{"tp_rank", "pp_rank"}
                                  : group == "tp" ? std::vector<std::string>{"dp_rank", "pp_rank"}
                                  : group == "pp" ? std::vector<std::string>{"dp_rank", "tp_rank"}
                                                  : std::vector<std::string>{};
  for (auto& [r, st] : v.ranks) {
    if (st.layout.is_null()) continue;
    bool ok = true;
    for (auto& k : same) ok = ok && st.layout.value(k, -1) == me.value(k, -2);
    if (ok) out.push_back(r);
  }
  return out;
}

struct CommOptions {
  double stall_s = 5;
};

// (group with its members, seq): one collective of one group.
using CallKey = std::pair<std::string, int64_t>;
using CallSig = std::tuple<std::string, int64_t, std::string>;  // op, count, dtype

class CommDetector {
 public:
  CommDetector(Tool& tool, const CommOptions& o) : tool_(tool), o_(o) {
    const char* dir = std::getenv("FAULTLINE_RUN_DIR");
    run_ = fl::run_name(dir ? dir : "");
  }

  void on_event(const Event& e) {
    if (e.source != "rank") return;
    if (e.kind == "collective") on_collective(e);
    if (e.kind == "error") on_error(e);
  }

  void on_tick(int64_t now) {
    for (auto& [key, calls] : inflight_) {
      int64_t oldest = now;
      for (auto& [r, c] : calls) oldest = std::min(oldest, c.since_ns);
      if ((now - oldest) / 1e9 >= o_.stall_s) {
        analyse(key, calls, fmt::format("stalled {:.1f} s", (now - oldest) / 1e9),
                tool_.view().max_step());
      }
    }
  }

 private:
  // The flight records: a collective stays in `inflight_` until the rank completes it.
  void on_collective(const Event& e) {
    // Groups of one name (every tensor-parallel group is "tp") are told apart by members.
    const std::string group = e.data.value("group", "");
    const CallKey key{
        fmt::format("{}[{}]", group, fmt::join(members(tool_.view(), group, e.rank), ",")),
        e.data.value("seq", int64_t{-1})};
    const std::string state = e.data.value("state", "");
    Call c{e.data.value("op", ""), e.data.value("dtype", ""), e.data.value("count", int64_t{0}),
           e.t_ns - static_cast<int64_t>(e.data.value("in_flight_ms", 0.0) * 1e6)};
    if (state == "completed") {
      auto it = inflight_.find(key);
      if (it != inflight_.end()) {
        it->second.erase(e.rank);
        if (it->second.empty()) inflight_.erase(it);
      }
      return;
    }
    // A timeout or failure is followed by the rank's error event, which decides the finding.
    inflight_[key][e.rank] = c;
  }

  void on_error(const Event& e) {
    const std::string cls = e.data.value("class", "");
    const std::string msg = e.data.value("message", "");
    Finding f;
    f.ranks = {e.rank};
    f.step = e.step;
    f.confidence = 0.8;
    f.evidence = fmt::format("rank {} failed ({}): {}", e.rank, cls, msg);
    if (cls == "comm timeout" || cls == "comm") {
      // Who the rank waited for: the flight records of the collective it was in.
      for (auto& [key, calls] : inflight_) {
        if (calls.count(e.rank)) {
          analyse(key, calls, "rank " + std::to_string(e.rank) + " failed (" + cls + ")", e.step);
          return;
        }
      }
      f.symptom = phase_symptom(e.rank);
    } else if (cls == "comm mismatch") {
      f.symptom = tool_.view().workload == "infer" ? "5.1" : comm::mismatch_symptom(msg, run_);
    } else if (const char* setup = comm::setup_symptom(cls, msg, run_)) {
      f.symptom = setup;
    } else {
      return;
    }
    tool_.report(f);
  }

  // A collective that stops a run: serving, training, or before training started.
  std::string phase_symptom(int rank) const {
    const RunView& v = tool_.view();
    if (v.workload == "infer") return std::string("5.1");
    auto it = v.ranks.find(rank);
    const bool started = it != v.ranks.end() && it->second.last_step >= 0;
    return std::string(started || v.max_step() >= 0 ? "4.7" : "2.2");
  }

  // What the members of one collective called: different calls are a mismatch, else the
  // members that never arrived are missing.
  void analyse(const CallKey& key, const std::map<int, Call>& calls, const std::string& why,
               int64_t step) {
    std::set<CallSig> kinds;
    for (auto& [r, c] : calls) kinds.insert({c.op, c.count, c.dtype});
    Finding f =
        kinds.size() > 1 ? mismatch(key, calls, kinds, why) : missing(key, calls, kinds, why);
    f.step = step;
    f.key = fmt::format("{}|{}", key.first, key.second);
    tool_.report(f);
  }

  // Same seq, different calls: the minority is the culprit.
  Finding mismatch(const CallKey& key, const std::map<int, Call>& calls,
                   const std::set<CallSig>& kinds, const std::string& why) const {
    std::map<CallSig, std::vector<int>> by;
    for (auto& [r, c] : calls) by[{c.op, c.count, c.dtype}].push_back(r);
    auto minority = std::min_element(by.begin(), by.end(), [](auto& a, auto& b) {
                      return a.second.size() < b.second.size();
                    })->second;
    const bool op_differs =
        std::set<std::string>{std::get<0>(*kinds.begin()), std::get<0>(*kinds.rbegin())}.size() > 1;
    Finding f;
    f.symptom = tool_.view().workload == "infer" ? "5.1" : op_differs ? "4.7" : "4.6";
    f.ranks = minority;
    std::vector<std::string> what;
    for (auto& [r, c] : calls)
      what.push_back(fmt::format("rank {} {}({}, {})", r, c.op, c.count, c.dtype));
    f.evidence = fmt::format("{} on group {} seq {}: ranks called different collectives: {}", why,
                             key.first, key.second, fmt::join(what, "; "));
    f.confidence = 0.9;
    return f;
  }

  Finding missing(const CallKey& key, const std::map<int, Call>& calls,
                  const std::set<CallSig>& kinds, const std::string& why) const {
    const auto group =
        members(tool_.view(), key.first.substr(0, key.first.find('[')), calls.begin()->first);
    std::vector<int> absent;
    for (int r : group) {
      if (!calls.count(r)) absent.push_back(r);
    }
    Finding f;
    f.symptom = phase_symptom(calls.begin()->first);
    f.ranks = absent;
    if (f.ranks.empty()) {
      for (auto& [r, c] : calls) f.ranks.push_back(r);
    }
    f.evidence = fmt::format("{} on group {} seq {} ({}): {} of {} members waiting; missing [{}]",
                             why, key.first, key.second, std::get<0>(*kinds.begin()), calls.size(),
                             group.size(), fmt::join(absent, ","));
    f.confidence = absent.empty() ? 0.6 : 0.85;
    return f;
  }

  Tool& tool_;
  const CommOptions o_;
  std::map<CallKey, std::map<int, Call>> inflight_;  // (group, seq) -> rank -> what it called
  std::string run_;                                  // the run's name, masked in the messages read
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-comm: collective stalls, timeouts, mismatches, setup failures"};
  CommOptions o;
  app.add_option("--stall-s", o.stall_s, "A collective in flight this long is a finding")
      ->capture_default_str();
  return run_tool<CommDetector>(app, argc, argv, "comm", o);
}
