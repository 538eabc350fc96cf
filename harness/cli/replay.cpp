// `faultline replay RUN_DIR`: run a finished run again, firing exactly the faults its ranks'
// fired logs recorded (no random choice left).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/cli/options.hpp"
#include "harness/run/runner.hpp"

namespace fl::cli {
namespace {

struct ReplayArgs {
  std::string run_dir;
  fl::harness::RunOptions ro;
};

int replay(ReplayArgs& a) {
  const auto s = fl::harness::replay_scenario(a.run_dir);
  std::printf("replaying %s with plan: %s\n", a.run_dir.c_str(),
              s.faults.plans.empty() ? "(nothing fired)" : s.faults.plans[0].c_str());
  a.ro.print_events = true;
  return fl::harness::run_scenario(s, a.ro).exit_code;
}

Handler setup_replay(CLI::App& sub) {
  auto a = std::make_shared<ReplayArgs>();
  sub.add_option("run_dir", a->run_dir, "results/runs/<id>")->required();
  add_run_dir_options(sub, a->ro);
  return [a] { return replay(*a); };
}

}  // namespace

const Command& replay_command() {
  static const Command c{
      "replay", "Run a finished run again, firing exactly the faults its fired logs recorded",
      setup_replay};
  return c;
}

}  // namespace fl::cli
