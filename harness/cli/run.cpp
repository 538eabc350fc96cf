// `faultline run SCENARIO`: launch, supervise, judge. Exit 0 pass, 1 fail, 2 harness/input
// error, 3 unknown, 4 interrupted (SIGINT/SIGTERM).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/metrics_flags.hpp"
#include "harness/cli/options.hpp"
#include "harness/model/scenario.hpp"
#include "harness/report/report.hpp"
#include "harness/run/runner.hpp"

namespace fl::cli {
namespace {

struct RunArgs {
  std::string scenario;
  std::vector<std::string> overrides;
  fl::harness::RunOptions ro;
  bool fix = false, write_html = false, quiet = false;
  MetricsFlags metrics;
};

int run(RunArgs& a) {
  resolve_metrics_flags(a.metrics, a.ro.metrics_listen, a.ro.metrics_secret);
  const auto s = fl::harness::load_scenario(a.scenario, {a.fix, a.overrides});
  a.ro.print_events = !a.quiet;
  a.ro.fix = a.fix;
  const auto res = fl::harness::run_scenario(s, a.ro);
  if (a.write_html && !res.run_dir.empty()) {
    std::printf("  report     %s\n", fl::harness::write_report(res.run_dir).c_str());
  }
  return res.exit_code;
}

Handler setup_run(CLI::App& sub) {
  auto a = std::make_shared<RunArgs>();
  sub.add_option("scenario", a->scenario, "Scenario YAML file")->required();
  sub.add_flag("--fix", a->fix, "Apply the scenario's fix overrides (the symptom must clear)");
  sub.add_option("--set", a->overrides, "Override a key: workload.steps=40 (repeatable)");
  add_run_dir_options(sub, a->ro);
  sub.add_option("--control", a->ro.control_addr,
                 "Control-plane address: HOST:PORT for TCP (default: unix:RUN_DIR/control.sock)");
  sub.add_flag("--shared-run-dir", a->ro.shared_run_dir,
               "Make the run directory 0755 (default 0700; the secret and socket stay 0600)");
  sub.add_option("--run-id", a->ro.run_id, "Run directory name (default: time-name-random)");
  sub.add_flag("--report", a->write_html, "Also write the run's HTML report (report.html)");
  sub.add_option("--detector", a->ro.detectors, detector_help());
  sub.add_option("--recovery", a->ro.recovery, recovery_help());
  sub.add_flag("-q,--quiet", a->quiet, "Print only the final summary (no header, no live events)");
  add_metrics_flags(sub, a->metrics, "RUN_DIR", "RUN_DIR/control.secret");
  return [a] { return run(*a); };
}

}  // namespace

const Command& run_command() {
  static const Command c{"run", "Run a scenario and judge it", setup_run};
  return c;
}

}  // namespace fl::cli
