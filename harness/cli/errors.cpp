// What a subcommand's exception becomes: exit 2 and one line. Input errors (a scenario, a usage
// error found after parsing) read as themselves; anything else is marked an error.
#include <cstdio>
#include <exception>

#include "harness/cli/command.hpp"
#include "harness/model/scenario.hpp"
#include "harness/suite/suite.hpp"

namespace fl::cli {

int run_handler(const Handler& handler) {
  try {
    return handler();
  } catch (const fl::harness::ScenarioError& e) {
    std::fprintf(stderr, "faultline: %s\n", e.what());
    return 2;
  } catch (const fl::harness::UsageError& e) {
    std::fprintf(stderr, "faultline: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "faultline: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace fl::cli
