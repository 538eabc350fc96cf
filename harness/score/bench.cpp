#include "harness/score/bench.hpp"

#include <cstdio>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/run/runner.hpp"
#include "harness/score/score.hpp"

namespace fl::harness {

namespace {

std::vector<RunTruth> load_truths(const std::vector<std::string>& dirs) {
  std::vector<RunTruth> runs;
  for (const auto& d : dirs) {
    try {
      runs.push_back(load_run_truth(d));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "faultline: skipping %s: %s\n", d.c_str(), e.what());
    }
  }
  return runs;
}

}  // namespace

int score_paths(const std::vector<std::string>& paths, bool markdown, const std::string& json_path,
                const std::vector<std::string>& compare, bool breakdown) {
  const auto runs = load_truths(collect_run_dirs(paths));
  const auto scores = score_detectors(runs);
  std::printf("%s", scores_table(scores, markdown).c_str());
  if (breakdown) std::printf("%s", breakdown_tables(scores, markdown).c_str());
  nlohmann::json j = scores_json(scores);
  if (compare.size() == 2) {
    const auto c = compare_detectors(scores, compare[0], compare[1]);
    std::printf("\n%s", comparison_text(c, markdown).c_str());
    j = {{"detectors", j}, {"comparison", comparison_json(c)}};
  }
  if (!json_path.empty()) write_atomic(json_path, j.dump(2) + "\n");
  return 0;
}

int bench_detectors(const BenchDetectorsOptions& o) {
  SuiteOptions so = o.suite_options;
  std::vector<std::string> tools = o.detectors;
  if (!o.sweep.empty()) {
    if (o.values.empty()) raise<ConfigError>("--sweep '{}' needs --values", o.sweep);
    for (const auto& v : o.values) tools.push_back(o.sweep + " " + v);
  }
  for (const auto& t : tools) {
    so.run_args.push_back("--detector");
    so.run_args.push_back(t);
  }
  so.name_suffix = "-detectors";
  const SuiteResult r = run_suite(o.suite, so);
  std::fprintf(stderr, "%s", suite_table(r).c_str());
  std::vector<std::string> dirs = {r.dir};
  dirs.insert(dirs.end(), o.soak.begin(), o.soak.end());
  const auto runs = load_truths(collect_run_dirs(dirs));
  const auto scores = score_detectors(runs);
  const std::string table = scores_table(scores, false);
  std::printf("\n%s", table.c_str());
  std::string md = fmt::format("# Detector leaderboard: suite {}\n\n", r.name);
  md += fmt::format("Command: `faultline bench-detectors {}", o.suite);
  for (const auto& t : o.detectors) md += fmt::format(" --detector '{}'", t);
  if (!o.sweep.empty()) {
    md += fmt::format(" --sweep '{}' --values", o.sweep);
    for (auto& v : o.values) md += " " + v;
  }
  for (const auto& s : o.soak) md += fmt::format(" --soak {}", s);
  md += fmt::format("`, {} runs{}.\n\n", r.cases.size(),
                    o.soak.empty() ? "" : ", plus the clean runs of the soak");
  const nlohmann::json provenance = r.provenance.to_json();
  md += provenance_markdown(provenance) + "\n";
  md += scores_table(scores, true);
  md += breakdown_tables(scores, true);
  write_atomic(r.dir + "/leaderboard.md", md);
  write_atomic(r.dir + "/leaderboard.json", nlohmann::json{{"suite", r.name},
                                                           {"runs", r.cases.size()},
                                                           {"provenance", provenance},
                                                           {"sweep", o.sweep},
                                                           {"sweep_values", o.values},
                                                           {"soak", o.soak},
                                                           {"detectors", scores_json(scores)}}
                                                    .dump(2) +
                                                "\n");
  std::printf("leaderboard: %s/leaderboard.md, %s/leaderboard.json\n", r.dir.c_str(),
              r.dir.c_str());
  return 0;
}

int bench_recovery(const BenchRecoveryOptions& o) {
  // The fault-free reference of every scenario and seed, then the faulty run with the tool.
  SuiteOptions ref = o.suite_options;
  ref.run_args = {"--set", "faults=[]",          "--set", "rank_env={}",
                  "--set", "recovery=\"\"",      "--set", "expect.oracle=completed",
                  "--set", "expect.symptom=\"\""};
  ref.name_suffix = "-reference";
  const SuiteResult a = run_suite(o.suite, ref);
  SuiteOptions rec = o.suite_options;
  if (!o.policy.empty()) rec.run_args = {"--recovery", o.policy};
  rec.name_suffix = "-recovery";
  const SuiteResult b = run_suite(o.suite, rec);
  std::map<std::pair<std::string, uint64_t>, std::string> reference;
  for (const auto& c : a.cases) reference[{c.name, c.seed}] = c.run_dir;
  std::vector<RecoveryScore> scores;
  for (const auto& c : b.cases) {
    auto it = reference.find({c.name, c.seed});
    RecoveryScore s = score_recovery(c.run_dir, it == reference.end() ? "" : it->second);
    s.scenario = c.name;
    scores.push_back(std::move(s));
  }
  std::printf("\n%s", recovery_table(scores, false).c_str());
  std::string md =
      fmt::format("# Recovery: suite {}\n\nCommand: `faultline bench-recovery {}{}`\n\n", b.name,
                  o.suite, o.policy.empty() ? "" : " --policy " + o.policy);
  md += provenance_markdown(b.provenance.to_json()) + "\n";
  md += recovery_table(scores, true);
  write_atomic(b.dir + "/recovery.md", md);
  write_atomic(b.dir + "/recovery.json", recovery_json(scores).dump(2) + "\n");
  std::printf("recovery: %s/recovery.md, %s/recovery.json\n", b.dir.c_str(), b.dir.c_str());
  int recovered = 0;
  for (auto& s : scores) recovered += s.recovered ? 1 : 0;
  return recovered == static_cast<int>(scores.size()) ? 0 : 1;
}

}  // namespace fl::harness
