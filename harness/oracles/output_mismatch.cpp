// output_mismatch: ranks that should agree on their output (a digest per group) do not; the
// ranks in the minority are the ones localised.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/ranks.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class OutputMismatch : public Oracle {
 public:
  std::string name() const override { return "output_mismatch"; }
  Finding check(const Expect&, const RunSummary& f) const override {
    Finding out;
    if (f.outputs.empty()) {
      Verdict v;
      v.outcome = f.ended() ? "fail" : "unknown";
      v.explanation = "no rank reported its output";
      out.verdict = v;
      return out;
    }
    std::map<std::string, std::map<std::string, std::vector<int>>> by_group;
    int64_t t_last = -1;
    for (auto& o : f.outputs) {
      by_group[o.group][o.digest].push_back(o.rank);
      t_last = std::max(t_last, o.t);
    }
    for (auto& [g, digests] : by_group) {
      if (digests.size() < 2) continue;
      Hit h{t_last, -1, {}, ""};
      std::vector<std::string> parts;
      size_t majority = 0;
      for (auto& [d, ranks] : digests) majority = std::max(majority, ranks.size());
      for (auto& [d, ranks] : digests) {
        parts.push_back(fmt::format("{} -> {}", format_ranks(ranks), d));
        if (ranks.size() < majority || digests.size() == 2) {
          for (int r : ranks) h.ranks.push_back(r);
        }
      }
      std::sort(h.ranks.begin(), h.ranks.end());
      h.what =
          fmt::format("ranks disagree on their output in group {}: {}", g, fmt::join(parts, "; "));
      out.hit = h;
      break;
    }
    out.absent = "every rank reported the same output";
    return out;
  }
};

}  // namespace

const Oracle& output_mismatch_oracle() {
  static const OutputMismatch o;
  return o;
}

}  // namespace fl::harness::oracles
