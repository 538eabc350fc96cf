// first_failure: the job's first failure is on the expected ranks (optionally with a message
// matching expect.pattern). The runner names it after the job (harness/run/torchelastic.hpp), as
// torchelastic's ChildFailedError does: the earliest of the ranks' error files (the exception
// @record wrote), the scenario's own signal, or a rank's exit; ranks their launcher closed
// because a peer failed are never first.
#include <regex>

#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class FirstFailure : public Oracle {
 public:
  std::string name() const override { return "first_failure"; }
  std::vector<KeySpec> keys() const override { return {pattern_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    return parse_pattern(c);
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const std::string& pattern = params<PatternParams>(x).pattern;
    Finding out;
    out.absent = "no rank failed";
    if (!f.first_failure) return out;
    const auto& ff = *f.first_failure;
    const std::string what =
        fmt::format("rank {} failed first ({}): {}", ff.rank, ff.how, ff.message);
    if (!rank_ok(x, ff.rank)) {
      out.absent = fmt::format("the first failure is not on the expected ranks: {}", what);
      return out;
    }
    if (!pattern.empty() && !std::regex_search(ff.message, std::regex(pattern))) {
      out.absent = fmt::format("the first failure does not match /{}/: {}", pattern, what);
      return out;
    }
    out.hit = Hit{ff.t, -1, {ff.rank}, what};
    return out;
  }
};

}  // namespace

const Oracle& first_failure_oracle() {
  static const FirstFailure o;
  return o;
}

}  // namespace fl::harness::oracles
