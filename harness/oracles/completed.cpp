// completed: every rank finished cleanly (a clean run, and the second half of a fix variant).
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

// What the rank's incarnation that ended at `end` reported (its last error event after the
// rank's previous exit; an event may be read just after the exit it preceded: the worker's class
// and message, e.g. a layout the configuration check refused), so the verdict names the cause;
// "" when it reported none.
std::string reported_error(const RunSummary& f, int rank, int64_t end) {
  int64_t begin = -1;  // a restarted rank: its earlier incarnations' errors are not this one's
  for (const auto& x : f.exits) {
    if (x.rank == rank && x.t < end) begin = std::max(begin, x.t);
  }
  const RunSummary::Err* last = nullptr;
  for (const auto& err : f.errors) {
    if (err.rank == rank && !err.message.empty() && err.t > begin) last = &err;
  }
  if (last != nullptr) {
    const auto& err = *last;
    constexpr size_t kMax = 300;
    std::string m = err.message.substr(0, err.message.find('\n'));
    if (m.size() > kMax) m = m.substr(0, kMax) + "...";
    return err.klass.empty() ? fmt::format(": {}", m) : fmt::format(": {} error: {}", err.klass, m);
  }
  return "";
}

class Completed : public Oracle {
 public:
  std::string name() const override { return "completed"; }
  Finding check(const Expect&, const RunSummary& f) const override {
    Verdict v;
    std::vector<int> bad;
    std::string why;
    std::set<int> ended_ok;
    // A restarted rank is judged by how its last incarnation ended (the harness kills the
    // earlier ones to restart them).
    std::map<int, const RunSummary::Exit*> last_exit;
    for (auto& e : f.exits) last_exit[e.rank] = &e;
    for (auto& [r, ep] : last_exit) {
      const RunSummary::Exit& e = *ep;
      if (e.klass == "ok") {
        ended_ok.insert(e.rank);
      } else if (!std::count(bad.begin(), bad.end(), e.rank)) {
        bad.push_back(e.rank);
        if (why.empty()) {
          why = fmt::format(
              "rank {} ended with {} {}{}", e.rank, e.klass,
              e.signaled ? fmt::format("(signal {})", e.code) : fmt::format("(exit {})", e.code),
              reported_error(f, e.rank, e.t));
        }
      }
    }
    const int world = f.world > 0 ? f.world : static_cast<int>(f.launch_t.size());
    if (bad.empty() && !f.run_timeout && static_cast<int>(ended_ok.size()) >= world && world > 0) {
      v.outcome = "pass";
      int64_t last = -1;
      for (auto& s : f.steps) last = std::max(last, s.step);
      v.step = last;
      v.explanation = fmt::format("all {} ranks finished cleanly (last step {})", world, last);
    } else if (!f.ended() && bad.empty()) {
      v.outcome = "unknown";
      v.explanation = "the history ends before the run did";
    } else {
      v.outcome = "fail";
      std::sort(bad.begin(), bad.end());
      v.ranks = bad;
      v.explanation = f.run_timeout ? "the run hit its timeout" + (why.empty() ? "" : "; " + why)
                      : why.empty() ? "not every rank finished"
                                    : why;
    }
    return {std::nullopt, "", v};
  }
};

}  // namespace

const Oracle& completed_oracle() {
  static const Completed o;
  return o;
}

}  // namespace fl::harness::oracles
