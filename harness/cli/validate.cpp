// `faultline validate SCENARIO`: check a scenario file offline, including what `run` would
// refuse on this machine; --print prints it resolved (every key).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/cli/command.hpp"
#include "harness/model/scenario.hpp"
#include "harness/run/runner.hpp"

namespace fl::cli {
namespace {

struct ValidateArgs {
  std::string scenario;
  std::vector<std::string> overrides;
  bool fix = false, print = false;
};

int validate(const ValidateArgs& a) {
  const auto s = fl::harness::load_scenario(a.scenario, {a.fix, a.overrides});
  fl::harness::check_runnable_here(s);  // what `run` would refuse, refused here first
  if (a.print) {
    YAML::Emitter em;
    em << s.resolved;
    std::printf("%s\n", em.c_str());
  } else {
    std::printf("%s: ok (%s, %d ranks, oracle %s)\n", a.scenario.c_str(), s.name.c_str(),
                s.topo.ranks, s.expect.oracle.c_str());
  }
  return 0;
}

Handler setup_validate(CLI::App& sub) {
  auto a = std::make_shared<ValidateArgs>();
  sub.add_option("scenario", a->scenario, "Scenario YAML file")->required();
  sub.add_flag("--fix", a->fix, "Check it with its fix applied");
  sub.add_option("--set", a->overrides, "Override a key (repeatable)");
  sub.add_flag("--print", a->print, "Print the resolved scenario (every key)");
  return [a] { return validate(*a); };
}

}  // namespace

const Command& validate_command() {
  static const Command c{"validate", "Check a scenario file", setup_validate};
  return c;
}

}  // namespace fl::cli
