// exit_class: a rank ended in the expected way (error, crash, signal, the kernel's OOM killer,
// the run's timeout), optionally with a given exit status.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::oracles {
namespace {

struct ExitClassParams : OracleParams {
  std::string exit_class = "any";
  int exit_code = -1;
};

class ExitClass : public Oracle {
 public:
  std::string name() const override { return "exit_class"; }
  std::vector<KeySpec> keys() const override {
    return {{"expect.exit_class",
             KeyType::kEnum,
             "any",
             "exit_class: how a rank must end",
             {"any", "error", "crash", "signal", "oom_kill", "timeout"}},
            {"expect.exit_code",
             KeyType::kInt,
             "-1",
             "exit_class: the exit status (-1: any)",
             {},
             -1,
             255}};
  }
  std::shared_ptr<const OracleParams> parse(const ExpectContext& c) const override {
    auto p = std::make_shared<ExitClassParams>();
    p->exit_class = c.e["exit_class"].as<std::string>();
    p->exit_code = c.e["exit_code"].as<int>();
    return p;
  }
  Finding check(const Expect& x, const RunSummary& f) const override {
    const auto& p = params<ExitClassParams>(x);
    Finding out;
    out.hit = first(
        x, f.exits,
        [&](const RunSummary::Exit& e) {
          if (e.klass == "ok" || e.torn_down) return false;
          if (p.exit_code >= 0 && (e.signaled || e.code != p.exit_code)) return false;
          if (p.exit_class == "any") return !e.by_harness;
          if (p.exit_class == "timeout") return e.by_harness && f.run_timeout;
          if (p.exit_class == "oom_kill") {
            return e.klass == "signal" && e.code == 9 && !e.by_harness &&
                   f.oom_killed.count(e.rank) > 0;
          }
          return e.klass == p.exit_class && !e.by_harness;
        },
        [&](const RunSummary::Exit& e) {
          return fmt::format("rank {} ended with {} ({} {})", e.rank, e.klass,
                             e.signaled ? "signal" : "exit", e.code);
        });
    out.absent = fmt::format("no rank ended with {}", p.exit_class);
    return out;
  }
};

}  // namespace

const Oracle& exit_class_oracle() {
  static const ExitClass o;
  return o;
}

}  // namespace fl::harness::oracles
