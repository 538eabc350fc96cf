#include "harness/agent/silence.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace fl::harness {

SilenceJudge::SilenceJudge(size_t agents) : a_(agents) {
  for (auto& x : a_) x.peers_at_last.assign(agents, 0);
}

void SilenceJudge::attach(size_t k, int64_t interval_ms, int64_t now_ns) {
  if (k >= a_.size()) return;
  a_[k].live = true;
  interval_ms_ = std::max(interval_ms_, std::max<int64_t>(interval_ms, 1));
  heard(k, now_ns);
}

void SilenceJudge::heard(size_t k, int64_t now_ns) {
  if (k >= a_.size() || !a_[k].live) return;
  Agent& x = a_[k];
  ++x.reports;
  x.last_ns = now_ns;
  x.pending_since_ns = -1;
  for (size_t j = 0; j < a_.size(); ++j) x.peers_at_last[j] = a_[j].reports;
}

void SilenceJudge::forget(size_t k) {
  if (k < a_.size()) a_[k].live = false;
}

std::optional<SilenceJudge::Verdict> SilenceJudge::judge(int64_t now_ns) {
  const int64_t interval_ns = interval_ms_ * 1'000'000;
  for (size_t k = 0; k < a_.size(); ++k) {
    Agent& x = a_[k];
    if (!x.live) continue;
    const int64_t silent_ns = now_ns - x.last_ns;
    // The peer heard most often since k's last report.
    size_t peer = k;
    uint64_t most = 0;
    for (size_t j = 0; j < a_.size(); ++j) {
      if (j == k || !a_[j].live) continue;
      const uint64_t since = a_[j].reports - x.peers_at_last[j];
      if (since > most) {
        most = since;
        peer = j;
      }
    }
    const bool silent = silent_ns >= static_cast<int64_t>(kBeats) * interval_ns && most >= kBeats;
    if (!silent) {
      x.pending_since_ns = -1;
      continue;
    }
    if (x.pending_since_ns < 0) x.pending_since_ns = now_ns;
    if (now_ns - x.pending_since_ns >= kConfirmBeats * interval_ns) {
      return Verdict{k, static_cast<double>(silent_ns) / 1e9, peer, most};
    }
  }
  return std::nullopt;
}

std::string silence_reason(const SilenceJudge::Verdict& v, const std::vector<std::string>& hosts) {
  return fmt::format(
      "heartbeat overdue: nothing heard from host {} for {:.1f} s while host {} was "
      "heard {} times",
      hosts.at(v.node), v.silent_s, hosts.at(v.peer), v.peer_reports);
}

}  // namespace fl::harness
