// `faultline repro SCENARIO`: the scenario and its fix, one after the other. The faulty variant
// must reproduce its symptom (verdict pass) and the fix variant must clear it (its own
// expectation passes): REPRODUCED / FIX VERIFIED, with the evidence.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/cli/repro.hpp"
#include "harness/model/scenario.hpp"
#include "harness/report/report.hpp"
#include "harness/run/runner.hpp"

namespace fl::cli {
namespace {

struct ReproArgs {
  std::string scenario;
  std::vector<std::string> overrides;
  fl::harness::RunOptions ro;
  bool write_html = false, quiet = false;
};

fl::harness::RunResult run_variant(const fl::harness::Scenario& s, const ReproArgs& a) {
  auto r = fl::harness::run_scenario(s, a.ro);
  if (a.write_html) std::printf("  report     %s\n", fl::harness::write_report(r.run_dir).c_str());
  return r;
}

ReproSummary repro_summary(ReproArgs& a) {
  const auto faulty = fl::harness::load_scenario(a.scenario, {false, a.overrides});
  if (!faulty.has_fix) {
    std::fprintf(stderr, "faultline repro: %s has no fix: section to verify\n", a.scenario.c_str());
    return {};
  }
  const auto fixed = fl::harness::load_scenario(a.scenario, {true, a.overrides});
  a.ro.print_events = !a.quiet;
  const auto r = run_variant(faulty, a);
  std::printf("\n");
  if (r.verdict.outcome == "interrupted") {
    // Ctrl-C (or a TERM) ends the command, not just the variant that was running.
    std::printf("INTERRUPTED     %s; the fix variant was not run\nruns: %s\n",
                r.verdict.explanation.c_str(), r.run_dir.c_str());
    return {false, false, true, 4};
  }
  a.ro.fix = true;
  const auto f = run_variant(fixed, a);
  if (f.verdict.outcome == "interrupted") {
    std::printf("INTERRUPTED     fix variant: %s\nruns: %s, %s\n", f.verdict.explanation.c_str(),
                r.run_dir.c_str(), f.run_dir.c_str());
    return {r.verdict.outcome == "pass", false, true, 4};
  }
  const bool reproduced = r.verdict.outcome == "pass";
  const bool verified = f.verdict.outcome == "pass";
  std::printf("\n%s  symptom %s: %s\n", reproduced ? "REPRODUCED    " : "NOT REPRODUCED",
              faulty.expect.symptom.c_str(), r.verdict.explanation.c_str());
  std::printf("%s  %s\n", verified ? "FIX VERIFIED  " : "FIX NOT VERIFIED",
              f.verdict.explanation.c_str());
  std::printf("runs: %s, %s\n", r.run_dir.c_str(), f.run_dir.c_str());
  const int rc = !r.harness_error.empty() || !f.harness_error.empty() ? 2
                 : reproduced && verified                             ? 0
                                                                      : 1;
  return {reproduced, verified, false, rc};
}

int repro(ReproArgs& a) {
  return repro_summary(a).exit_code;
}

Handler setup_repro(CLI::App& sub) {
  auto a = std::make_shared<ReproArgs>();
  sub.add_option("scenario", a->scenario, "Scenario YAML file")->required();
  add_run_dir_options(sub, a->ro);
  sub.add_option("--set", a->overrides, "Override a key in both runs (repeatable)");
  sub.add_option("--detector", a->ro.detectors, detector_help());
  sub.add_flag("--report", a->write_html, "Also write both runs' HTML reports");
  sub.add_flag("-q,--quiet", a->quiet, "Print only the final summaries");
  return [a] { return repro(*a); };
}

}  // namespace

ReproSummary repro_file(const std::string& scenario, bool quiet) {
  ReproArgs a;
  a.scenario = scenario;
  a.quiet = quiet;
  a.ro.print_summary = !quiet;
  return repro_summary(a);
}

const Command& repro_command() {
  static const Command c{"repro",
                         "Run a scenario and its fix: REPRODUCED / FIX VERIFIED, with the evidence",
                         setup_repro};
  return c;
}

}  // namespace fl::cli
