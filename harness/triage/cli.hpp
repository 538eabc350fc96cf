// The `faultline triage` subcommand's options and run (harness/cli/triage.cpp registers it).
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace fl::triage {

struct CliOptions;

class Command {
 public:
  explicit Command(CLI::App& sub);  // adds triage's options to the `triage` subcommand `sub`
  bool parsed() const;
  int run() const;  // exit code: 0 found, 1 none, 2 input error

 private:
  CLI::App* sub_ = nullptr;
  std::shared_ptr<CliOptions> o_;
};

}  // namespace fl::triage
