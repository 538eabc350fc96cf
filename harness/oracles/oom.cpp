// oom: a rank reported running out of memory (device or host allocator), or the kernel's OOM
// killer ended it (its memory cgroup says so: a SIGKILL from anyone else does not count).
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class Oom : public Oracle {
 public:
  std::string name() const override { return "oom"; }
  std::vector<KeySpec> keys() const override { return {pattern_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    return parse_pattern(c);
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    Finding out = error_of(x, f, "out of memory", "out of memory");
    if (!out.hit) {
      out.hit = first(
          x, f.exits,
          [&](const RunSummary::Exit& e) {
            return e.signaled && e.code == 9 && !e.by_harness && f.oom_killed.count(e.rank) > 0;
          },
          [&](const RunSummary::Exit& e) {
            return fmt::format("rank {} was killed by the kernel OOM killer (memory cgroup)",
                               e.rank);
          });
    }
    return out;
  }
};

}  // namespace

const Oracle& oom_oracle() {
  static const Oom o;
  return o;
}

}  // namespace fl::harness::oracles
