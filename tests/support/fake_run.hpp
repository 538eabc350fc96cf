// A run directory written by hand: a scenario file and a history whose events a test places at
// chosen times, for the pure functions that read run directories (scoring, traces, metrics).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::test {

// The two scenarios scoring tests write most: a positive (symptom 4.7, found by its error
// signature) and a clean run.
inline constexpr const char* kPositiveScenario = R"(name: pos
topology: {ranks: 2}
expect: {symptom: "4.7", oracle: error_signature, pattern: "comm timeout"}
)";
inline constexpr const char* kCleanScenario = R"(name: clean
topology: {ranks: 2}
expect: {oracle: completed}
)";

struct FakeRun {
  std::string dir;
  std::ofstream hist;
  uint64_t i = 0;
  FakeRun(const std::string& run_dir, const std::string& scenario_yaml) : dir(run_dir) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/scenario.yaml") << scenario_yaml;
    hist.open(dir + "/history.jsonl");
  }
  FakeRun(const std::string& root, const std::string& name, const std::string& scenario_yaml)
      : FakeRun(root + "/" + name, scenario_yaml) {}
  // One history line at t_s seconds of harness time.
  void ev(double t_s, const std::string& source, int rank, const std::string& kind,
          nlohmann::json data, int64_t step = -1) {
    nlohmann::json j = {{"i", i++},         {"t_ns", static_cast<int64_t>(t_s * 1e9)},
                        {"source", source}, {"rank", rank},
                        {"seq", 0},         {"time_unix_ns", 0},
                        {"kind", kind},     {"step", step},
                        {"data", data},     {"late", false}};
    hist << j.dump() << "\n";
    hist.flush();
  }
  void diag(double t_s, const std::string& det, const std::string& sym, std::vector<int> ranks) {
    ev(t_s, "detector:" + det, -1, "diagnosis",
       {{"detector", det},
        {"symptom", sym},
        {"ranks", ranks},
        {"confidence", 0.5},
        {"evidence", "test"},
        {"stage", 0}});
  }
  void launch(double t_s, int ranks) {
    for (int r = 0; r < ranks; ++r) ev(t_s, "harness", r, "launch", {{"argv", {"fl-train"}}});
  }
};

}  // namespace fl::test
