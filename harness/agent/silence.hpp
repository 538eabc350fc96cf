// When is a per-host agent that says nothing lost? Every agent reports at least every heartbeat
// interval (a beat when it has nothing else to say). A fixed deadline on one agent's silence would
// make the verdict depend on how loaded the machines are, so an agent is judged silent only
// relative to its peers: it said nothing for `kBeats` intervals while another agent of the same run
// was heard at least `kBeats` times since its last word, and that stays so for a confirmation of
// two more intervals (a harness that stalled reads every agent's queued reports within that). A run
// with one host, or one where every agent went quiet together, has no peer to compare with: there
// the connection's keepalive (generous, controller.cpp) is the judge. Pure logic: the caller gives
// the clock, so unit tests need no time to pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fl::harness {

class SilenceJudge {
 public:
  static constexpr uint64_t kBeats = 5;  // intervals of silence, and peer reports heard meanwhile
  static constexpr int64_t kConfirmBeats = 2;  // the verdict holds this many intervals more

  struct Verdict {
    size_t node = 0;      // the silent agent
    double silent_s = 0;  // since its last report
    size_t peer = 0;      // an agent heard meanwhile
    uint64_t peer_reports = 0;
  };

  explicit SilenceJudge(size_t agents);
  // Agent `k` registered (its first report) with its heartbeat interval.
  void attach(size_t k, int64_t interval_ms, int64_t now_ns);
  // Any report of agent `k` (a beat, an answer, relayed telemetry).
  void heard(size_t k, int64_t now_ns);
  // Agent `k` is gone or stopped: neither judged nor a peer any more.
  void forget(size_t k);
  // The first agent that is silent now (after the confirmation), or nothing.
  std::optional<Verdict> judge(int64_t now_ns);

 private:
  struct Agent {
    bool live = false;
    int64_t last_ns = 0;
    uint64_t reports = 0;
    std::vector<uint64_t> peers_at_last;  // every agent's `reports` when this one was last heard
    int64_t pending_since_ns = -1;        // when the silence condition first held
  };
  std::vector<Agent> a_;
  int64_t interval_ms_ = 0;  // the longest interval of any agent
};

// "nothing heard from host A for 6.0 s while host B was heard 7 times" (the reason of agent_lost).
std::string silence_reason(const SilenceJudge::Verdict& v, const std::vector<std::string>& hosts);

}  // namespace fl::harness
