// checkpoint_error: a rank reported a checkpoint error (save or load), matching expect.pattern
// when one is given.
#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class CheckpointError : public Oracle {
 public:
  std::string name() const override { return "checkpoint_error"; }
  std::vector<KeySpec> keys() const override { return {pattern_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    return parse_pattern(c);
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    return error_of(x, f, "checkpoint", "a checkpoint error");
  }
};

}  // namespace

const Oracle& checkpoint_error_oracle() {
  static const CheckpointError o;
  return o;
}

}  // namespace fl::harness::oracles
