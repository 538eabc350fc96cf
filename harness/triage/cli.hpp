// The `faultline triage` subcommand: registered by main.cpp with one call, run when parsed.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace fl::triage {

struct CliOptions;

class Command {
 public:
  explicit Command(CLI::App& app);  // adds the `triage` subcommand to `app`
  bool parsed() const;
  int run() const;  // exit code: 0 found, 1 none, 2 input error

 private:
  CLI::App* sub_ = nullptr;
  std::shared_ptr<CliOptions> o_;
};

}  // namespace fl::triage
