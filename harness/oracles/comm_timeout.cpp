// comm_timeout: a collective (expect.op, or any) timed out — from the flight recorder's
// timed-out entry, or from the rank's own comm-timeout error.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class CommTimeout : public Oracle {
 public:
  std::string name() const override { return "comm_timeout"; }
  Finding check(const Expect& x, const RunSummary& f) const override {
    Finding out;
    out.hit = first(
        x, f.timeouts, [&](const RunSummary::Coll& c) { return x.op.empty() || c.op == x.op; },
        [&](const RunSummary::Coll& c) {
          return fmt::format("{} on group {} (seq {}) timed out", c.op, c.group, c.seq);
        });
    if (!out.hit) {
      out.hit = first(
          x, f.errors,
          [&](const RunSummary::Err& e) {
            return e.klass == "comm timeout" &&
                   (x.op.empty() || e.message.find(" " + x.op + " on group") != std::string::npos);
          },
          [&](const RunSummary::Err& e) { return "comm timeout: " + e.message; });
    }
    out.absent = fmt::format("no {} timed out", x.op.empty() ? "collective" : x.op);
    return out;
  }
};

}  // namespace

const Oracle& comm_timeout_oracle() {
  static const CommTimeout o;
  return o;
}

}  // namespace fl::harness::oracles
