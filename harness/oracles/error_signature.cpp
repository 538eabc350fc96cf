// error_signature: a rank printed a line matching expect.pattern (the error text a user would
// search an issue tracker for), or, when none did, reported an error whose message matches it.
#include <regex>

#include <fmt/format.h>

#include "harness/model/key_checks.hpp"
#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class ErrorSignature : public Oracle {
 public:
  std::string name() const override { return "error_signature"; }
  std::vector<KeySpec> keys() const override { return {pattern_key()}; }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = parse_pattern(c);
    if (static_cast<const PatternParams&>(*p).pattern.empty()) {
      loader::fail_at(c.file, c.doc ? c.doc : c.e, c.path + ".pattern",
                      "the error_signature oracle needs a pattern");
    }
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const std::string& pattern = params<PatternParams>(x).pattern;
    Finding out;
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      Verdict v;
      v.outcome = "unknown";
      v.explanation =
          fmt::format("expect.pattern '{}' is not a valid regex: {}", pattern, e.what());
      out.verdict = v;
      return out;
    }
    out.hit = first(
        x, f.lines, [&](const RunSummary::Line& l) { return std::regex_search(l.text, re); },
        [&](const RunSummary::Line& l) { return fmt::format("output matched: {}", l.text); });
    // Under workload.fidelity: pytorch a rank prints the real job's lines instead of faultline's
    // sentence; the error it reports still carries the sentence, so the oracle falls back to it
    // (never reached in the default dialect, where the sentence is printed).
    if (!out.hit) {
      out.hit = first(
          x, f.errors, [&](const RunSummary::Err& e) { return std::regex_search(e.message, re); },
          [&](const RunSummary::Err& e) { return fmt::format("error matched: {}", e.message); });
    }
    out.absent = fmt::format("no rank printed a line matching /{}/", pattern);
    return out;
  }
};

}  // namespace

const Oracle& error_signature_oracle() {
  static const ErrorSignature o;
  return o;
}

}  // namespace fl::harness::oracles
