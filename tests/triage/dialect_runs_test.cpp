// The catalogue's dialect against real runs (slow: one short scenario per event, 1-17 s each):
// every example of harness/triage/dialect.cpp that names a scenario is what that scenario's run
// prints. `faultline run SCENARIO` runs it; some rank's output.log must hold a line that is the
// example's lead ("faultline worker error (KIND): ", or its own) and then the producer's format,
// and fl-detect-logs must read that line as the example's signature. Under
// workload.fidelity: pytorch the comm-timeout, store and plugin-build runs must print the lines of
// the example's pytorch dialect (their numbers and HOST:PID:TID aside).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness/detectors/logs_signatures.hpp"
#include "harness/triage/dialect.hpp"
#include "tests/support/process.hpp"
#include "tests/support/scratch.hpp"

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

std::string format_regex(const std::string& f) {  // as dialect_test's: {...} fields any text
  static const std::regex special(R"([.^$|()\[\]*+?\\/])");
  const std::string esc = std::regex_replace(f, special, "\\$&");
  return std::regex_replace(esc, std::regex(R"(\{[^}]*\})"), ".*");
}

// The lines every rank printed (output.log without its "[+1.2s] [err] " prefix).
std::vector<std::string> printed_lines(const fs::path& run) {
  std::vector<std::string> out;
  static const std::regex prefix(R"(^\[\+[0-9.]+s\] \[(out|err)\] )");
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(run / "ranks", ec)) {
    std::ifstream in(d.path() / "output.log");
    for (std::string l; std::getline(in, l);) out.push_back(std::regex_replace(l, prefix, ""));
  }
  return out;
}

// Runs `scenario` (with `sets`, "KEY=VALUE ..."), in a fresh results folder; returns what its ranks
// printed. The command is an argv (no shell); its own output is kept in out.txt for a failure.
std::vector<std::string> run(const std::string& scenario, const std::string& sets) {
  static int n = 0;
  const fs::path results = ::fl::test::removed_at_exit(
      fs::temp_directory_path() /
      ("fl-dialect-runs-" + std::to_string(::getpid()) + "-" + std::to_string(n++)));
  fs::create_directories(results);
  // A catalogue scenario, or a reported issue's when the catalogue has none of that name.
  const fs::path source(FAULTLINE_SOURCE_DIR);
  fs::path file = source / "scenarios/symptoms" / (scenario + ".yaml");
  if (!fs::exists(file)) file = source / "scenarios/issues" / (scenario + ".yaml");
  std::vector<std::string> argv = {FAULTLINE_BIN,    "run",      file.string(), "--results",
                                   results.string(), "--run-id", "r",           "-q"};
  std::istringstream words(sets);
  for (std::string w; words >> w;) argv.insert(argv.end(), {"--set", w});
  // The scenario's run fails on purpose; its ranks' lines are what counts, not its exit status.
  const auto ran = fl::test::run_process(argv, {}, std::chrono::seconds(300));
  std::ofstream(results / "out.txt") << ran.output;
  auto lines = printed_lines(results / "r");
  std::error_code ec;
  fs::remove_all(results, ec);
  return lines;
}

std::string lead(const dialect::Example& e) {
  if (e.kind == nullptr) return e.lead ? e.lead : "";
  return std::string("faultline worker error (") + e.kind + "): ";
}

TEST(TriageDialectRuns, EveryExampleIsWhatItsScenariosRunPrints) {
  int runs = 0;
  for (const auto& e : dialect::examples()) {
    if (e.scenario == nullptr) continue;
    ++runs;
    const auto lines = run(e.scenario, e.run_set ? e.run_set : "");
    const std::regex want("^" + format_regex(lead(e)) + format_regex(e.format));
    std::string seen;
    for (const auto& l : lines) {
      if (!std::regex_search(l, want)) continue;
      seen = l;
      break;
    }
    if (seen.empty()) {  // every example is checked, whatever the others print
      ADD_FAILURE() << e.signature << ": no line of " << e.scenario << " is '" << lead(e)
                    << e.format << "...' (" << lines.size() << " lines)";
      continue;
    }
    const auto* s = detect::logs::classify(seen);
    EXPECT_STREQ(s ? s->name : "(none)", e.signature) << seen;
  }
  EXPECT_GE(runs, 20);
}

// A pytorch line with its numbers and NCCL WARN's HOST:PID:TID masked.
std::string shape(std::string l) {
  l = std::regex_replace(l, std::regex(R"(^\S+:[0-9]+:[0-9]+ \[)"), "HOST:PID:TID [");
  l = std::regex_replace(l, std::regex(R"(OpType=[A-Z_]+)"), "OpType=OP");
  l = std::regex_replace(l, std::regex(R"('[^' ]+')"), "'NAME'");  // a plugin's name
  return std::regex_replace(l, std::regex("[0-9]+"), "N");
}

TEST(TriageDialectRuns, ThePytorchDialectOfTimeoutStoreAndPluginRunsIsTheExamples) {
  for (const char* sig : {"comm timeout", "address in use", "store unreachable", "build failed"}) {
    const dialect::Example* e = nullptr;
    for (const auto& x : dialect::examples())
      if (std::string(x.signature) == sig) e = &x;
    ASSERT_NE(e, nullptr) << sig;
    ASSERT_NE(e->scenario, nullptr) << sig;
    ASSERT_FALSE(e->pytorch.empty()) << sig;
    std::vector<std::string> got;
    for (const auto& l : run(e->scenario, "workload.fidelity=pytorch")) got.push_back(shape(l));
    for (const char* p : e->pytorch) {
      const std::string want = shape(p);
      EXPECT_NE(std::find(got.begin(), got.end(), want), got.end())
          << sig << ": " << e->scenario << " printed no line of the shape " << want;
    }
  }
}

}  // namespace
}  // namespace fl::triage
