// comm_timeout: a collective (expect.op, or any; on group expect.group, or any) timed out — from
// the flight recorder's timed-out entry, or from the rank's own comm-timeout error.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::oracles {
namespace {

struct CommTimeoutParams : OracleParams {
  std::string op;     // "": any collective
  std::string group;  // "": on any group
  // A rank's comm-timeout error names them: "... all_reduce on group 'world' (seq 3, ...".
  bool names_them(const std::string& message) const {
    if (group.empty())
      return op.empty() || message.find(" " + op + " on group") != std::string::npos;
    const std::string what = (op.empty() ? "" : " " + op) + " on group '" + group + "'";
    return message.find(what) != std::string::npos;
  }
};

class CommTimeout : public Oracle {
 public:
  std::string name() const override { return "comm_timeout"; }
  std::vector<KeySpec> keys() const override {
    return {{"expect.op", KeyType::kString, "\"\"",
             "comm_timeout: the collective (all_reduce, ...; \"\": any)"},
            {"expect.group", KeyType::kString, "\"\"",
             "comm_timeout: the process group the collective ran on, as the flight recorder names "
             "it (world, ...; \"\": any)"}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<CommTimeoutParams>();
    p->op = c.e["op"].as<std::string>();
    p->group = c.e["group"].as<std::string>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const auto& p = params<CommTimeoutParams>(x);
    const std::string& op = p.op;
    Finding out;
    out.hit = first(
        x, f.timeouts,
        [&](const RunSummary::Coll& c) {
          return (op.empty() || c.op == op) && (p.group.empty() || c.group == p.group);
        },
        [&](const RunSummary::Coll& c) {
          return fmt::format("{} on group {} (seq {}) timed out", c.op, c.group, c.seq);
        });
    if (!out.hit) {
      out.hit = first(
          x, f.errors,
          [&](const RunSummary::Err& e) {
            return e.klass == "comm timeout" && p.names_them(e.message);
          },
          [&](const RunSummary::Err& e) { return "comm timeout: " + e.message; });
    }
    out.absent = fmt::format("no {} timed out{}", op.empty() ? "collective" : op,
                             p.group.empty() ? "" : " on group " + p.group);
    return out;
  }
};

}  // namespace

const Oracle& comm_timeout_oracle() {
  static const CommTimeout o;
  return o;
}

}  // namespace fl::harness::oracles
