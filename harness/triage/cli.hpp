// The `faultline triage` subcommand's options and run (harness/cli/triage.cpp registers it).
#pragma once

#include <memory>

#include "harness/triage/draft.hpp"

namespace CLI {
class App;
}

namespace fl::triage {

struct CliOptions;

class Command {
 public:
  explicit Command(CLI::App& sub);  // adds triage's options to the `triage` subcommand `sub`
  bool parsed() const;
  // How --run and --eval-repro run `faultline repro` (the cli layer's, in process).
  void set_repro(Repro repro);
  // Exit code: 0 found, 1 none, 2 input error; with --run, repro's (0 reproduced and fixed).
  int run() const;

 private:
  CLI::App* sub_ = nullptr;
  std::shared_ptr<CliOptions> o_;
};

}  // namespace fl::triage
