// `faultline suite SUITE`: many runs like a test runner (selection, retries, shards, JUnit), on
// this machine or as one Slurm job array; --list prints the selection and runs nothing.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "base/private_dir.hpp"
#include "harness/cli/command.hpp"
#include "harness/cli/metrics_flags.hpp"
#include "harness/cli/options.hpp"
#include "harness/suite/suite.hpp"

namespace fl::cli {
namespace {

struct SuiteArgs {
  std::string suite, shard, seeds, recovery;
  std::vector<std::string> detectors, sets;
  bool list_only = false;
  fl::harness::SuiteOptions so;
  CLI::Option* json = nullptr;  // --json, with or without a PATH
  CLI::App* sub = nullptr;
  MetricsFlags metrics;
};

// --list [--json [PATH]]: the selection, as text or JSON.
int list(const SuiteArgs& a) {
  const auto plan = fl::harness::plan_suite(a.suite, a.so);
  if (a.json->count() == 0) {
    std::printf("%s", fl::harness::suite_list(plan).c_str());
    return 0;
  }
  const std::string text = fl::harness::suite_list_json(plan).dump(2) + "\n";
  if (a.so.json_path.empty()) std::printf("%s", text.c_str());
  if (!a.so.json_path.empty()) fl::write_file_atomic(a.so.json_path, text);
  return 0;
}

// What every run of the suite gets on its `faultline run` command line.
void add_run_args(SuiteArgs& a) {
  auto& args = a.so.run_args;
  for (auto& d : a.detectors) {
    args.push_back("--detector");
    args.push_back(d);
  }
  if (a.so.allow_shared_results) args.push_back("--allow-shared-results");
  if (!a.recovery.empty()) args.insert(args.end(), {"--recovery", a.recovery});
  for (auto& kv : a.sets) args.insert(args.end(), {"--set", kv});
}

int suite(SuiteArgs& a) {
  auto& so = a.so;
  if (!a.shard.empty())
    fl::harness::parse_shard(a.shard, so.select.shard_index, so.select.shard_count);
  if (!a.seeds.empty()) so.select.seeds = fl::harness::parse_seeds(a.seeds);
  if (a.list_only) return list(a);
  if (a.json->count() > 0 && so.json_path.empty()) {
    throw fl::harness::UsageError(
        "--json: expected a PATH for the summary copy (without one it goes with --list)");
  }
  add_run_args(a);
  resolve_metrics_flags(a.metrics, so.metrics_listen, so.metrics_secret);
  if (a.sub->count("--jobs") > 0) so.slurm.max_running = so.jobs;  // slurm: --array=...%N
  const auto r = fl::harness::run_suite(a.suite, so);
  std::printf("%s", fl::harness::suite_table(r).c_str());
  return r.exit_code();
}

void add_output_options(CLI::App& sub, SuiteArgs& a) {
  sub.add_flag("--allow-shared-results", a.so.allow_shared_results, kSharedResultsHelp);
  sub.add_option("--junit", a.so.junit_path, "JUnit XML file (default: in the suite directory)");
  a.json = sub.add_option(
      "--json", a.so.json_path,
      "JSON summary (default: in the suite directory); with --list: the list as JSON (to PATH, or "
      "stdout without one)");
  a.json->expected(0, 1);
}

void add_selection_options(CLI::App& sub, SuiteArgs& a) {
  auto& sel = a.so.select;
  sub.add_option("--only", sel.only, "Only scenarios whose name matches this glob (repeatable)");
  sub.add_option("--exclude", sel.exclude,
                 "Leave out scenarios whose name matches this glob (repeatable; after --only, "
                 "--symptom and --stage)");
  sub.add_option("--symptom", sel.symptoms,
                 "Only scenarios of this symptom, e.g. 4.11 (repeatable)");
  // The stages are the taxonomy's (scenarios/taxonomy.yaml); CliHelp tests hold them equal.
  sub.add_option("--stage", sel.stages, "Only symptoms of this stage, 1-5 (repeatable)")
      ->check(CLI::Range(1, 5));
  sub.add_option("--seeds", a.seeds, "Seeds for every scenario, e.g. 1,2,3 (replaces the suite's)");
  sub.add_option("--shard", a.shard, "Run shard I of N (I/N, from 1): a stable split by case id");
  sub.add_flag("--last-failed", sel.last_failed,
               "Only the cases that did not pass in the previous results of this suite");
}

void add_policy_options(CLI::App& sub, SuiteArgs& a) {
  sub.add_flag("--fail-fast", a.so.fail_fast,
               "Start nothing new after the first failure (the rest is reported skipped)");
  sub.add_option("--maxfail", a.so.max_fail,
                 "Start nothing new after N cases failed (runs in flight finish; the rest is "
                 "reported skipped)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--longest-first", a.so.longest_first,
                 "Start the cases that took longest in this earlier summary.json (or suite "
                 "directory) first; cases it lacks start before them")
      ->type_name("SUMMARY")
      ->check(CLI::ExistingPath);
  sub.add_option("--retries", a.so.retries, "More tries for a failed case (passing on one: flaky)")
      ->check(CLI::Range(0, 100));
  sub.add_flag("--list", a.list_only, "Print the selected cases and their count; run nothing");
  sub.add_option("--detector", a.detectors, detector_help());
  sub.add_option("--set", a.sets,
                 "Override a key in every run, e.g. workload.fidelity=pytorch (repeatable)");
  sub.add_option("--recovery", a.recovery, recovery_help());
}

// docs/cluster.md#suites-as-a-slurm-job-array
void add_executor_options(CLI::App& sub, SuiteArgs& a) {
  const auto& executors = fl::harness::executor_names();
  sub.add_option("--executor", a.so.executor,
                 "Where the runs execute: " + or_list(executors) + " (slurm: one job array)")
      ->capture_default_str()
      ->check(CLI::IsMember(executors));
  auto& slurm = a.so.slurm;
  sub.add_option("--partition", slurm.partition, "slurm: the partition (default: the cluster's)");
  sub.add_option("--time-limit", slurm.time_limit,
                 "slurm: each array task's time limit (sbatch --time)");
  sub.add_flag("--overcommit", slurm.overcommit, "slurm: ranks share CPUs (sbatch --overcommit)");
  sub.add_option("--sbatch-arg", slurm.sbatch_args,
                 "slurm: one more sbatch argument, e.g. --sbatch-arg=--qos=low (repeatable)");
}

Handler setup_suite(CLI::App& sub) {
  auto a = std::make_shared<SuiteArgs>();
  a->sub = &sub;
  add_suite_options(sub, a->suite, a->so)->check(CLI::Range(1, 1024));
  add_output_options(sub, *a);
  add_selection_options(sub, *a);
  add_policy_options(sub, *a);
  add_executor_options(sub, *a);
  add_metrics_flags(sub, a->metrics, "SUITE_DIR", "SUITE_DIR/metrics.secret, drawn for the suite");
  return [a] { return suite(*a); };
}

}  // namespace

const Command& suite_command() {
  static const Command c{"suite", "Run a suite (file or directory of scenarios)", setup_suite};
  return c;
}

}  // namespace fl::cli
