// comm_timeout: a collective (expect.op, or any) timed out — from the flight recorder's
// timed-out entry, or from the rank's own comm-timeout error.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::oracles {
namespace {

struct CommTimeoutParams : OracleParams {
  std::string op;  // "": any collective
};

class CommTimeout : public Oracle {
 public:
  std::string name() const override { return "comm_timeout"; }
  std::vector<KeySpec> keys() const override {
    return {{"expect.op", KeyType::kString, "\"\"",
             "comm_timeout: the collective (all_reduce, ...; \"\": any)"}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<CommTimeoutParams>();
    p->op = c.e["op"].as<std::string>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const std::string& op = params<CommTimeoutParams>(x).op;
    Finding out;
    out.hit = first(
        x, f.timeouts, [&](const RunSummary::Coll& c) { return op.empty() || c.op == op; },
        [&](const RunSummary::Coll& c) {
          return fmt::format("{} on group {} (seq {}) timed out", c.op, c.group, c.seq);
        });
    if (!out.hit) {
      out.hit = first(
          x, f.errors,
          [&](const RunSummary::Err& e) {
            return e.klass == "comm timeout" &&
                   (op.empty() || e.message.find(" " + op + " on group") != std::string::npos);
          },
          [&](const RunSummary::Err& e) { return "comm timeout: " + e.message; });
    }
    out.absent = fmt::format("no {} timed out", op.empty() ? "collective" : op);
    return out;
  }
};

}  // namespace

const Oracle& comm_timeout_oracle() {
  static const CommTimeout o;
  return o;
}

}  // namespace fl::harness::oracles
