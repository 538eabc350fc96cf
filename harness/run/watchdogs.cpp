#include "harness/run/watchdogs.hpp"

#include <algorithm>

#include "harness/history/history.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

Watchdogs::Watchdogs(const Scenario& s, History& hist) : s_(s), hist_(hist) {
  hist_.add_listener([this](const HistoryEvent& e) {
    std::lock_guard lock(summary_mu_);
    add_event(summary_, e);
  });
}

bool Watchdogs::hang_established(bool tools_watching) {
  if (s_.expect.oracle != "hang") return false;
  const int64_t now = hist_.now_ns();
  if (now - last_hang_check_ <= 500'000'000) return false;
  last_hang_check_ = now;
  RunSummary seen;
  {
    std::lock_guard lock(summary_mu_);
    seen = summary_;
  }
  finish_summary(seen);
  if (hang_first_ns_ < 0 && oracles::find_hang(s_.expect, seen, now - 1'000'000'000)) {
    hang_first_ns_ = now;
    if (tools_watching) {
      hist_.harness("hang_established", {{"tools_window_s", kToolHangWindowS}});
    }
  }
  const int64_t window = tools_watching ? kToolHangWindowS * 1'000'000'000LL : 0;
  return hang_first_ns_ >= 0 && now - hang_first_ns_ >= window;
}

void Watchdogs::rank_failed(int rank) {
  if (first_failure_ns_ >= 0) return;
  first_failure_ns_ = hist_.now_ns();
  first_failure_rank_ = rank;
}

bool Watchdogs::fail_fast_due(int& failed_rank, double& grace_s) {
  if (first_failure_ns_ < 0) return false;
  grace_s = std::max(
      {10.0, s_.timeouts.comm_ms / 1000.0 + 5.0, s_.timeouts.rendezvous_ms / 1000.0 + 5.0});
  if (hist_.now_ns() - first_failure_ns_ < static_cast<int64_t>(grace_s * 1e9)) return false;
  failed_rank = first_failure_rank_;
  first_failure_ns_ = -1;  // once per failure; a restart may start over
  return true;
}

}  // namespace fl::harness
