// exit_class: a rank ended in the expected way (error, crash, signal, the kernel's OOM killer,
// the run's timeout), optionally with a given exit status.
#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

class ExitClass : public Oracle {
 public:
  std::string name() const override { return "exit_class"; }
  Finding check(const Expect& x, const RunSummary& f) const override {
    Finding out;
    out.hit = first(
        x, f.exits,
        [&](const RunSummary::Exit& e) {
          if (e.klass == "ok") return false;
          if (x.exit_code >= 0 && (e.signaled || e.code != x.exit_code)) return false;
          if (x.exit_class == "any") return !e.by_harness;
          if (x.exit_class == "timeout") return e.by_harness && f.run_timeout;
          if (x.exit_class == "oom_kill") {
            return e.klass == "signal" && e.code == 9 && !e.by_harness &&
                   f.oom_killed.count(e.rank) > 0;
          }
          return e.klass == x.exit_class && !e.by_harness;
        },
        [&](const RunSummary::Exit& e) {
          return fmt::format("rank {} ended with {} ({} {})", e.rank, e.klass,
                             e.signaled ? "signal" : "exit", e.code);
        });
    out.absent = fmt::format("no rank ended with {}", x.exit_class);
    return out;
  }
};

}  // namespace

const Oracle& exit_class_oracle() {
  static const ExitClass o;
  return o;
}

}  // namespace fl::harness::oracles
