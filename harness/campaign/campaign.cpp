// `faultline campaign`: the campaign directory, the generated scenario files (each validated by
// the scenario loader before anything runs), the suite that runs them (the suite executor, so
// -j, progress, signals and the summary files are the suite's), the ground truth of every run
// and the campaign's summary.
#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/campaign/campaign.hpp"
#include "harness/model/scenario.hpp"
#include "harness/run/layout_check.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/provenance.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness::campaign {

namespace fs = std::filesystem;

namespace {

std::string campaign_dir(const Options& o, const Spec& s) {
  if (o.out_dir.empty()) {
    return make_unique_dir("results/campaigns", fmt::format("{}-s{}", s.name, o.seed));
  }
  if (fs::exists(o.out_dir + "/manifest.json")) {
    throw UsageError(
        fmt::format("-o {}: holds a campaign already (manifest.json); give a new "
                    "directory",
                    o.out_dir));
  }
  fs::create_directories(o.out_dir);
  return fs::absolute(o.out_dir).lexically_normal().string();
}

// Every generated file loads with the project's own loader, and has a layout the workers accept,
// before any run starts.
void validate_all(const Spec& s, const std::string& dir, const std::vector<GeneratedRun>& runs) {
  for (const auto& g : runs) {
    try {
      check_layout_accepted(load_scenario(dir + "/" + g.file));  // a layout every rank refuses
    } catch (const ScenarioError& e) {
      std::vector<std::string> from;
      for (auto& f : g.faults) from.push_back(f.templ);
      throw ScenarioError(fmt::format(
          "{}\n{}: run {} does not load, or every rank would refuse it (drawn from faults {}); "
          "nothing was run",
          e.what(), s.file, g.index,
          from.empty() ? "none" : fmt::format("{}", fmt::join(from, ", "))));
    }
  }
}

void write_files(const Options& o, const Spec& s, const std::string& dir,
                 const std::vector<GeneratedRun>& runs) {
  fs::create_directories(dir + "/scenarios");
  nlohmann::json manifest = {{"campaign", s.name},
                             {"spec", fs::absolute(s.file).string()},
                             {"seed", o.seed},
                             {"runs", nlohmann::json::array()}};
  for (const auto& g : runs) {
    write_atomic(dir + "/" + g.file, g.yaml);
    manifest["runs"].push_back(g.manifest());
  }
  std::ifstream spec(s.file);
  write_atomic(dir + "/spec.yaml", std::string((std::istreambuf_iterator<char>(spec)), {}));
  write_atomic(dir + "/manifest.json", manifest.dump(2) + "\n");
  write_atomic(dir + "/suite.yaml",
               fmt::format("name: {}\ndescription: campaign {} seed {}, {} runs\n"
                           "scenarios: [\"scenarios/*.yaml\"]\nfix: false\n",
                           s.name, s.name, o.seed, runs.size()));
}

void count_truth(Result& r, const nlohmann::json& t) {
  if (t.value("clean", false)) {
    ++r.clean;
    if (t.value("outcome", "") == "pass") ++r.clean_completed;
  } else {
    ++r.faulty;
    if (t.value("outcome", "") == "pass") ++r.reproduced;
  }
  ++r.outcomes[t.value("outcome", "unknown")];
  for (const auto& f : t["faults"]) {
    ++r.faults;
    if (!f["cascade_of"].is_null()) ++r.cascades;
    if (f.value("fired", false)) ++r.fired;
    if (f.value("manifested", false)) ++r.manifested;
  }
}

}  // namespace

Result run_campaign(const Options& o) {
  if (o.runs < 1) throw UsageError(fmt::format("--runs {}: expected 1 or more runs", o.runs));
  if (o.jobs < 1) throw UsageError(fmt::format("-j {}: expected 1 or more jobs", o.jobs));
  const Spec spec = load_spec(o.spec);
  std::vector<GeneratedRun> runs;
  for (int i = 1; i <= o.runs; ++i) runs.push_back(generate_run(spec, o.seed, i));
  Result r;
  r.dir = campaign_dir(o, spec);
  write_files(o, spec, r.dir, runs);
  validate_all(spec, r.dir, runs);
  r.runs = o.runs;
  if (o.no_run) return r;
  SuiteOptions so;
  so.results_dir = r.dir;
  so.jobs = o.jobs;
  so.progress = o.progress;
  so.faultline_bin = o.faultline_bin;
  r.load_start = load_average_1m();
  const auto t0 = std::chrono::steady_clock::now();
  const SuiteResult suite = run_suite(r.dir + "/suite.yaml", so);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.load_end = load_average_1m();
  r.suite_dir = suite.dir;
  r.interrupted = suite.interrupted;
  std::string truth;
  for (const auto& c : suite.cases) {
    for (const auto& g : runs) {
      if (g.name != c.name) continue;
      auto t = run_truth(g, c.run_dir);
      if (c.outcome == "error" || c.outcome == "interrupted") t["outcome"] = c.outcome;
      count_truth(r, t);
      truth += t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
  }
  write_atomic(r.dir + "/ground_truth.jsonl", truth);
  write_atomic(r.dir + "/summary.json", r.to_json().dump(2) + "\n");
  return r;
}

nlohmann::json Result::to_json() const {
  return {{"dir", dir},
          {"suite_dir", suite_dir},
          {"runs", runs},
          {"faulty_runs", faulty},
          {"clean_runs", clean},
          {"reproduced", reproduced},
          {"clean_completed", clean_completed},
          {"faults", faults},
          {"cascades", cascades},
          {"fired", fired},
          {"manifested", manifested},
          {"outcomes", outcomes},
          {"interrupted", interrupted},
          {"wall_s", wall_s},
          {"runs_per_min", wall_s > 0 ? runs * 60.0 / wall_s : 0.0},
          {"load1_start", load_start},
          {"load1_end", load_end}};
}

std::string Result::text() const {
  auto pct = [](int a, int b) { return b > 0 ? 100.0 * a / b : 0.0; };
  std::string outs;
  for (auto& [k, v] : outcomes) outs += fmt::format("{}{} {}", outs.empty() ? "" : ", ", k, v);
  const std::string stopped = interrupted.empty()
                                  ? ""
                                  : fmt::format(
                                        "stopped    by {}: the runs it cut short or never started "
                                        "are `interrupted`\n",
                                        interrupted);
  return stopped + fmt::format(
                       "campaign   {} runs in {:.0f} s ({:.1f} runs/min), load {:.1f} -> {:.1f}\n"
                       "faulty     {} runs: reproduced {} ({:.0f}%)\n"
                       "clean      {} runs with decoys: completed {} ({:.0f}%)\n"
                       "faults     {} drawn ({} cascades): fired {}, manifested {}\n"
                       "outcomes   {}\n"
                       "files      {}\n",
                       runs, wall_s, wall_s > 0 ? runs * 60.0 / wall_s : 0.0, load_start, load_end,
                       faulty, reproduced, pct(reproduced, faulty), clean, clean_completed,
                       pct(clean_completed, clean), faults, cascades, fired, manifested, outs, dir);
}

}  // namespace fl::harness::campaign
