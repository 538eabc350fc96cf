// faultline: the command line.
//   run SCENARIO        launch, supervise, judge; exit 0 pass, 1 fail, 2 harness/input error
//                       (usage errors too), 3 unknown, 4 interrupted (SIGINT/SIGTERM)
//   suite SUITE         many runs like a test runner: selection, retries, shards, JUnit
//   validate SCENARIO   check a scenario file (and print it resolved with --print)
//   verdict RUN_DIR     judge a run again from its history
//   control ADDR ACTION act on a live run over the control plane
//   agent               a multi-host run's per-host agent (started by the harness)
//   keys                every scenario key with its default (docs/scenarios.md)
//   score RUN|SUITE...  detector scores against ground truth (docs/detectors.md)
//   bench-detectors / bench-recovery SUITE   leaderboards
//   report DIR          self-contained HTML of a run or suite;  diff OLD NEW  regressions
//   trace RUN_DIR       the run's timeline for ui.perfetto.dev;  metrics SUITE...  Prometheus
//   settings / sites    every FAULTLINE_ setting / every fault site in this build
//   clean               remove what killed runs left outside their run directories (--dry-run)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <grpcpp/grpcpp.h>

#include "base/control_auth.hpp"
#include "base/settings.hpp"
#include "harness/agent/agent.hpp"
#include "harness/catalog/catalog.hpp"
#include "harness/faults/residue.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/report/report.hpp"
#include "harness/run/runner.hpp"
#include "harness/launch/worker_catalog.hpp"
#include "harness/model/scenario.hpp"
#include "harness/score/bench.hpp"
#include "harness/suite/build_info.hpp"
#include "harness/suite/suite.hpp"
#include "harness/triage/cli.hpp"
#include "injector/plan.hpp"

namespace {

// Every setting and site of this build, the workers' included (they answer --describe).
int print_settings(bool json) {
  const auto& c = fl::harness::worker_catalog();
  for (auto& e : c.errors) std::fprintf(stderr, "faultline: %s\n", e.c_str());
  if (json) {
    auto arr = nlohmann::json::array();
    for (auto& s : c.settings) {
      arr.push_back({{"env", s.env},
                     {"type", s.type},
                     {"default", s.default_value},
                     {"current", s.current},
                     {"description", s.description}});
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return c.errors.empty() ? 0 : 1;
  }
  std::printf("%-32s %-7s %-12s %-12s %s\n", "variable", "type", "default", "current",
              "description");
  int status = c.errors.empty() ? 0 : 1;
  for (auto& s : c.settings) {
    std::string cur = s.current;
    if (cur.rfind("error: ", 0) == 0) {
      std::fprintf(stderr, "faultline: %s\n", cur.c_str() + 7);
      cur = "INVALID";
      status = 2;
    }
    std::printf("%-32s %-7s %-12s %-12s %s\n", s.env.c_str(), s.type.c_str(),
                s.default_value.empty() ? "\"\"" : s.default_value.c_str(),
                cur.empty() ? "\"\"" : cur.c_str(), s.description.c_str());
  }
  return status;
}

int print_sites(bool json) {
  const auto& c = fl::harness::worker_catalog();
  for (auto& e : c.errors) std::fprintf(stderr, "faultline: %s\n", e.c_str());
  const int status = c.errors.empty() ? 0 : 1;
  if (json) {
    auto arr = nlohmann::json::array();
    for (auto& s : c.sites) arr.push_back({{"name", s.name}, {"file", s.file}, {"line", s.line}});
    std::printf("%s\n", arr.dump(2).c_str());
    return status;
  }
  std::printf("%-24s %s\n", "site", "location");
  for (auto& s : c.sites) std::printf("%-24s %s:%d\n", s.name.c_str(), s.file.c_str(), s.line);
  std::printf("# %zu fault sites%s\n", c.sites.size(),
              c.sites_compiled ? "" : " (this build compiled them out)");
  return status;
}

int control(const std::string& addr, const std::string& action, int rank, int sig,
            const std::string& plan, const std::string& checkpoint,
            const std::string& secret_file) {
  std::string secret;
  if (!secret_file.empty()) {
    std::ifstream in(secret_file);
    if (!(in >> secret)) {
      std::fprintf(stderr, "faultline control: cannot read the secret from %s\n",
                   secret_file.c_str());
      return 2;
    }
  } else {
    secret = fl::control_secret_for(addr);
  }
  auto stub = faultline::v1::Controller::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  faultline::v1::ControlRequest req;
  req.set_action(action);
  req.set_rank(rank);
  req.set_signal(sig);
  req.set_plan(plan);
  req.set_checkpoint(checkpoint);
  req.set_requester("faultline control");
  faultline::v1::ControlReply reply;
  grpc::ClientContext ctx;
  if (!secret.empty()) ctx.AddMetadata(fl::kControlSecretHeader, secret);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  auto st = stub->Control(&ctx, req, &reply);
  if (!st.ok()) {
    std::fprintf(stderr, "faultline control: %s: %s\n", addr.c_str(), st.error_message().c_str());
    return 2;
  }
  std::printf("%s: %s\n", reply.ok() ? "ok" : "refused", reply.message().c_str());
  for (auto& f : reply.faults()) std::printf("  %s\n", f.c_str());
  return reply.ok() ? 0 : 1;
}

// The faulty variant must reproduce its symptom (verdict pass) and the fix variant must clear it
// (its own expectation passes).
int repro_scenario(const std::string& path, fl::harness::RunOptions ro,
                   const std::vector<std::string>& overrides, bool write_html) {
  auto faulty = fl::harness::load_scenario(path, {false, overrides});
  if (!faulty.has_fix) {
    std::fprintf(stderr, "faultline repro: %s has no fix: section to verify\n", path.c_str());
    return 2;
  }
  auto fixed = fl::harness::load_scenario(path, {true, overrides});
  auto a = fl::harness::run_scenario(faulty, ro);
  if (write_html) std::printf("  report     %s\n", fl::harness::write_report(a.run_dir).c_str());
  std::printf("\n");
  ro.fix = true;
  auto b = fl::harness::run_scenario(fixed, ro);
  if (write_html) std::printf("  report     %s\n", fl::harness::write_report(b.run_dir).c_str());
  const bool reproduced = a.verdict.outcome == "pass";
  const bool verified = b.verdict.outcome == "pass";
  std::printf("\n%s  symptom %s: %s\n", reproduced ? "REPRODUCED    " : "NOT REPRODUCED",
              faulty.expect.symptom.c_str(), a.verdict.explanation.c_str());
  std::printf("%s  %s\n", verified ? "FIX VERIFIED  " : "FIX NOT VERIFIED",
              b.verdict.explanation.c_str());
  std::printf("runs: %s, %s\n", a.run_dir.c_str(), b.run_dir.c_str());
  if (!a.harness_error.empty() || !b.harness_error.empty()) return 2;
  return reproduced && verified ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline: reproduce distributed deep-learning failures on purpose"};
  app.require_subcommand(1);
  {
    std::string v = fl::harness::version_text();
    v.pop_back();  // CLI11 ends the line itself
    app.set_version_flag("--version", v, "Print version, commit, build type, compiler, options");
  }
  bool json = false;
  auto* settings = app.add_subcommand("settings", "Print every setting with its current value");
  settings->add_flag("--json", json, "JSON output");
  auto* sites = app.add_subcommand("sites", "List the fault sites compiled into this build");
  sites->add_flag("--json", json, "JSON output");

  std::string scenario_path, run_dir, addr, action, plan, checkpoint;
  std::vector<std::string> overrides;
  fl::harness::RunOptions ro;
  bool fix = false, print = false;
  int rank = -1, sig = 9;
  auto* run = app.add_subcommand("run", "Run a scenario and judge it");
  run->add_option("scenario", scenario_path, "Scenario YAML file")->required();
  run->add_flag("--fix", fix, "Apply the scenario's fix overrides (the symptom must clear)");
  run->add_option("--set", overrides, "Override a key: workload.steps=40 (repeatable)");
  run->add_option("--results", ro.results_dir, "Where run directories go")->capture_default_str();
  run->add_option("--control", ro.control_addr,
                  "Control-plane address: HOST:PORT for TCP (default: unix:RUN_DIR/control.sock)");
  run->add_flag("--shared-run-dir", ro.shared_run_dir,
                "Make the run directory 0755 (default 0700; the secret and socket stay 0600)");
  run->add_option("--run-id", ro.run_id, "Run directory name (default: time-name-random)");
  const char* shared_help =
      "Accept a --results directory (or one above it) that another user owns or can write, with "
      "a warning; that user can then swap the run directory for their own (refused by default)";
  run->add_flag("--allow-shared-results", ro.allow_shared_results, shared_help);
  const char* detector_help =
      "Start a detector beside the run (repeatable): hang, comm, numeric, straggler, memory, "
      "logs, baseline (all six), or a command line";
  const char* recovery_help =
      "Start a recovery tool: restart, shrink, microbatch, skip-batch, reset-scale, or a command";
  bool write_html = false, quiet = false;
  run->add_flag("--report", write_html, "Also write the run's HTML report (report.html)");
  run->add_option("--detector", ro.detectors, detector_help);
  run->add_option("--recovery", ro.recovery, recovery_help);
  run->add_flag("-q,--quiet", quiet, "Print only the final summary (no header, no live events)");
  auto* validate = app.add_subcommand("validate", "Check a scenario file");
  validate->add_option("scenario", scenario_path, "Scenario YAML file")->required();
  validate->add_flag("--fix", fix, "Check it with its fix applied");
  validate->add_option("--set", overrides, "Override a key (repeatable)");
  validate->add_flag("--print", print, "Print the resolved scenario (every key)");
  auto* verdict = app.add_subcommand("verdict", "Judge a run again from its history");
  verdict->add_option("run_dir", run_dir, "results/runs/<id>")->required();
  verdict->add_flag("--json", json, "JSON output");
  auto* ctl = app.add_subcommand("control", "Act on a live run through its control plane");
  ctl->add_option("address", addr, "Control-plane address (printed in the run's history)")
      ->required();
  ctl->add_option("action", action,
                  "kill_rank, restart_rank, restart_job, abort, list_faults, arm_faults, "
                  "clear_faults, dump_flight_recorder")
      ->required();
  ctl->add_option("--rank", rank, "Target rank");
  ctl->add_option("--signal", sig, "kill_rank: signal number");
  ctl->add_option("--plan", plan, "arm_faults: fault plan");
  ctl->add_option("--checkpoint", checkpoint, "restart_job: checkpoint directory");
  std::string secret_file;
  ctl->add_option("--secret-file", secret_file,
                  "The run's control.secret (default: FAULTLINE_CONTROL_SECRET, or the "
                  "control.secret beside a unix:RUN_DIR/control.sock address)");
  fl::harness::AgentOptions agent_opts;
  auto* agent = app.add_subcommand(
      "agent", "A multi-host run's per-host agent (the harness starts it; docs/cluster.md)");
  agent->add_option("--control", agent_opts.control, "The run's control-plane address")->required();
  agent->add_option("--host", agent_opts.host, "This host's name in topology.hosts")->required();
  agent->add_option("--run-dir", agent_opts.run_dir, "The run directory")->required();
  agent->add_flag("--allow-shared-results", agent_opts.allow_shared_results,
                  "Accept a run directory above which another user can write (the harness passes "
                  "it on when it was given it)");
  auto* replay = app.add_subcommand(
      "replay", "Run a finished run again, firing exactly the faults its fired logs recorded");
  replay->add_option("run_dir", run_dir, "results/runs/<id>")->required();
  replay->add_option("--results", ro.results_dir, "Where run directories go")
      ->capture_default_str();
  replay->add_flag("--allow-shared-results", ro.allow_shared_results, shared_help);
  auto* catalog =
      app.add_subcommand("catalog", "The 34 symptoms, their causes, fixes and scenarios");
  catalog->add_flag("--json", json, "JSON output");
  bool references = false;
  catalog->add_flag("--references", references,
                    "Where each scenario comes from: a cited issue or pr, or the mechanism it "
                    "stands for");
  std::string catalog_file = FAULTLINE_SOURCE_DIR "/scenarios/catalog.yaml";
  std::string symptoms_dir = FAULTLINE_SOURCE_DIR "/scenarios/symptoms";
  catalog->add_option("--catalog", catalog_file, "Catalogue file")->capture_default_str();
  catalog->add_option("--scenarios", symptoms_dir, "Scenario directory")->capture_default_str();
  fl::harness::SuiteOptions so;
  std::string suite_path;
  auto* suite = app.add_subcommand("suite", "Run a suite (file or directory of scenarios)");
  suite->add_option("suite", suite_path, "Suite YAML or a directory of scenarios")->required();
  suite->add_option("-j,--jobs", so.jobs, "Runs at the same time")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  suite->add_option("--results", so.results_dir, "Where suite directories go")
      ->capture_default_str();
  suite->add_flag("--allow-shared-results", so.allow_shared_results, shared_help);
  suite->add_option("--junit", so.junit_path, "JUnit XML file (default: in the suite directory)");
  auto* suite_json = suite->add_option(
      "--json", so.json_path,
      "JSON summary (default: in the suite directory); with --list: the list as JSON (to PATH, or "
      "stdout without one)");
  suite_json->expected(0, 1);
  std::string shard, seeds;
  bool list_only = false;
  suite->add_option("--only", so.select.only,
                    "Only scenarios whose name matches this glob "
                    "(repeatable)");
  suite->add_option("--exclude", so.select.exclude,
                    "Leave out scenarios whose name matches this glob (repeatable; after --only, "
                    "--symptom and --stage)");
  suite->add_option("--symptom", so.select.symptoms,
                    "Only scenarios of this symptom, e.g. 4.11 "
                    "(repeatable)");
  suite->add_option("--stage", so.select.stages, "Only symptoms of this stage, 1-5 (repeatable)")
      ->check(CLI::Range(1, 5));
  suite->add_option("--seeds", seeds,
                    "Seeds for every scenario, e.g. 1,2,3 (replaces the suite's)");
  suite->add_option("--shard", shard, "Run shard I of N (I/N, from 1): a stable split by case id");
  suite->add_flag("--last-failed", so.select.last_failed,
                  "Only the cases that did not pass in the previous results of this suite");
  suite->add_flag("--fail-fast", so.fail_fast,
                  "Start nothing new after the first failure (the rest is reported skipped)");
  suite
      ->add_option("--maxfail", so.max_fail,
                   "Start nothing new after N cases failed (runs in flight finish; the rest is "
                   "reported skipped)")
      ->check(CLI::NonNegativeNumber);
  suite->add_option("--retries", so.retries, "More tries for a failed case (passing on one: flaky)")
      ->check(CLI::Range(0, 100));
  suite->add_flag("--list", list_only, "Print the selected cases and their count; run nothing");
  std::vector<std::string> suite_detectors;
  std::string suite_recovery;
  suite->add_option("--detector", suite_detectors, detector_help);
  std::vector<std::string> suite_sets;
  suite->add_option("--set", suite_sets,
                    "Override a key in every run, e.g. workload.fidelity=pytorch (repeatable)");
  suite->add_option("--recovery", suite_recovery, recovery_help);
  // docs/cluster.md#suites-as-a-slurm-job-array
  suite
      ->add_option("--executor", so.executor,
                   "Where the runs execute: local, or slurm (one job array)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "slurm"}));
  suite->add_option("--partition", so.slurm.partition,
                    "slurm: the partition (default: the cluster's)");
  suite->add_option("--time-limit", so.slurm.time_limit,
                    "slurm: each array task's time limit (sbatch --time)");
  suite->add_flag("--overcommit", so.slurm.overcommit,
                  "slurm: ranks share CPUs (sbatch --overcommit)");
  suite->add_option("--sbatch-arg", so.slurm.sbatch_args,
                    "slurm: one more sbatch argument, e.g. --sbatch-arg=--qos=low (repeatable)");

  std::vector<std::string> score_paths;
  std::string score_json;
  bool markdown = false;
  auto* score = app.add_subcommand(
      "score", "Score the detectors of finished runs or suites against their ground truth");
  score->add_option("paths", score_paths, "Run directories or suite directories")->required();
  score->add_flag("--markdown", markdown, "Markdown table");
  score->add_option("--json", score_json, "Also write the scores as JSON to this file");
  std::string report_dir, report_out, diff_old, diff_new;
  bool report_runs = false;
  auto* report = app.add_subcommand(
      "report", "Write a self-contained HTML report of a run or a suite (report.html)");
  report->add_option("dir", report_dir, "Run directory or suite directory")->required();
  report->add_option("-o,--output", report_out, "HTML file (default: DIR/report.html)");
  report->add_flag("--runs", report_runs, "Suite: also write every run's report");
  std::string trace_dir, trace_out, metrics_out;
  std::vector<std::string> metrics_dirs;
  auto* trace = app.add_subcommand(
      "trace", "Write a run's timeline as a trace for ui.perfetto.dev / chrome://tracing");
  trace->add_option("dir", trace_dir, "Run directory")->required();
  trace->add_option("-o,--output", trace_out, "Trace file (default: DIR/trace.json)");
  auto* metrics =
      app.add_subcommand("metrics", "Suite results as Prometheus metrics (text exposition format)");
  metrics->add_option("dirs", metrics_dirs, "Suite directories")->required();
  metrics->add_option("-o,--output", metrics_out,
                      "File to write (e.g. for node_exporter's textfile collector; default: "
                      "standard output)");
  fl::harness::DiffOptions diff_opts;
  auto* diff = app.add_subcommand(
      "diff", "Compare two suite results; exit 1 on a regression (nightly jobs)");
  diff->add_option("old", diff_old, "Earlier suite directory or summary JSON")->required();
  diff->add_option("new", diff_new, "Later suite directory or summary JSON")->required();
  diff->add_option("--time-ratio", diff_opts.time_ratio,
                   "Time to symptom this many times slower is a regression")
      ->capture_default_str();
  diff->add_option("--time-min-s", diff_opts.time_min_s, "...and at least this much slower")
      ->capture_default_str();
  diff->add_option("--throughput-ratio", diff_opts.throughput_ratio,
                   "Clean tokens/s below this share of before is a regression")
      ->capture_default_str();
  diff->add_flag("--outcomes-only", diff_opts.outcomes_only,
                 "Compare outcomes only (no timing or throughput)");
  fl::harness::BenchDetectorsOptions bd;
  auto* bench_det = app.add_subcommand(
      "bench-detectors", "Run a suite with detectors attached and write their leaderboard");
  bench_det->add_option("suite", bd.suite, "Suite YAML or a directory of scenarios")->required();
  bench_det->add_option("--detector", bd.detectors, detector_help)->capture_default_str();
  bench_det->add_option("--sweep", bd.sweep,
                        "A detector and its knob to sweep, e.g. \"hang --floor-s\"");
  bench_det->add_option("--values", bd.values, "The knob's values (one detector per value)")
      ->delimiter(',');
  bench_det->add_option("-j,--jobs", bd.suite_options.jobs, "Runs at the same time")
      ->capture_default_str();
  bench_det->add_option("--results", bd.suite_options.results_dir, "Where suite directories go")
      ->capture_default_str();
  fl::harness::BenchRecoveryOptions br;
  auto* bench_rec = app.add_subcommand(
      "bench-recovery",
      "Run a suite's scenarios fault-free and with a recovery tool; score the recovery");
  bench_rec->add_option("suite", br.suite, "Suite YAML or a directory of scenarios")->required();
  bench_rec->add_option("--policy", br.policy,
                        "Recovery policy or command (default: each scenario's recovery key)");
  bench_rec->add_option("-j,--jobs", br.suite_options.jobs, "Runs at the same time")
      ->capture_default_str();
  bench_rec->add_option("--results", br.suite_options.results_dir, "Where suite directories go")
      ->capture_default_str();
  auto* repro = app.add_subcommand(
      "repro", "Run a scenario and its fix: REPRODUCED / FIX VERIFIED, with the evidence");
  repro->add_option("scenario", scenario_path, "Scenario YAML file")->required();
  repro->add_option("--results", ro.results_dir, "Where run directories go")->capture_default_str();
  repro->add_option("--set", overrides, "Override a key in both runs (repeatable)");
  repro->add_flag("--allow-shared-results", ro.allow_shared_results, shared_help);
  repro->add_option("--detector", ro.detectors, detector_help);
  repro->add_flag("--report", write_html, "Also write both runs' HTML reports");
  repro->add_flag("-q,--quiet", quiet, "Print only the final summaries");
  auto* keys = app.add_subcommand("keys", "Every scenario key with type, default and meaning");
  bool clean_dry_run = false;
  auto* clean = app.add_subcommand(
      "clean", "Remove what killed runs left outside their run directories (cgroups, /dev/shm)");
  clean->add_flag("--dry-run", clean_dry_run, "List what would be removed; remove nothing");
  clean->add_flag("--json", json, "JSON output");
  const fl::triage::Command triage(app);

  // Usage errors exit 2 as every input error does (CLI11_PARSE would return CLI11's own codes).
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A mistyped command reads better named than as "a subcommand is required".
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' &&
        std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::fprintf(stderr, "faultline: '%s' is not a command (allowed: %s)\n", argv[1],
                   fmt::format("{}", fmt::join(names, ", ")).c_str());
      return 2;
    }
    std::fprintf(stderr, "faultline: %s (faultline --help, or COMMAND --help)\n", e.what());
    return 2;
  }
  ro.print_events = !quiet;
  if (settings->parsed()) return print_settings(json);
  if (sites->parsed()) return print_sites(json);
  if (keys->parsed()) {
    std::printf("%s", fl::harness::schema_markdown().c_str());
    return 0;
  }
  if (triage.parsed()) return triage.run();
  if (agent->parsed()) return fl::harness::run_agent(agent_opts);
  if (clean->parsed()) return fl::harness::faults::clean_command(clean_dry_run, json);
  if (ctl->parsed()) return control(addr, action, rank, sig, plan, checkpoint, secret_file);
  try {
    if (verdict->parsed()) {
      fl::harness::RecoveredHistory seen;
      auto v = fl::harness::judge_run_dir(run_dir, &seen);
      if (json) {
        auto j = v.to_json();
        j["rank_events"] = seen.rank_events;
        j["recovered_from_rank_files"] = seen.recovered;
        std::printf("%s\n",
                    j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        std::printf("%s (oracle %s): %s\n", v.outcome.c_str(), v.oracle.c_str(),
                    v.explanation.c_str());
        if (seen.recovered > 0) {
          std::printf(
              "(judged with %d rank events from ranks/*/events.jsonl that the history "
              "lacks)\n",
              seen.recovered);
        }
      }
      return fl::harness::outcome_exit_code(v.outcome);
    }
    if (catalog->parsed()) {
      auto entries = fl::harness::load_catalog(catalog_file, symptoms_dir);
      if (json) {
        std::printf("%s\n", fl::harness::catalog_json(entries).dump(2).c_str());
      } else if (references) {
        std::printf("%s", fl::harness::references_table(entries).c_str());
      } else {
        std::printf("%s", fl::harness::catalog_table(entries).c_str());
      }
      return 0;
    }
    if (report->parsed()) {
      if (report_runs && std::filesystem::exists(report_dir + "/summary.json")) {
        const auto summary = fl::harness::load_suite_summary(report_dir);
        for (const auto& c : summary["cases"]) {
          const std::string d = c.value("run_dir", "");
          if (!d.empty() && std::filesystem::exists(d + "/history.jsonl")) {
            fl::harness::write_report(d);
          }
        }
      }
      std::printf("%s\n", fl::harness::write_report(report_dir, report_out).c_str());
      return 0;
    }
    if (trace->parsed()) {
      std::printf("%s\n", fl::harness::write_trace(trace_dir, trace_out).c_str());
      return 0;
    }
    if (metrics->parsed()) {
      const std::string text = fl::harness::prometheus_metrics(metrics_dirs);
      if (metrics_out.empty()) {
        std::fwrite(text.data(), 1, text.size(), stdout);
      } else {
        // Written whole and renamed: a textfile collector never reads half a file (and a
        // temporary of a fresh name: never a symlink planted at NAME.tmp).
        fl::harness::write_atomic(metrics_out, text);
        std::printf("%s\n", metrics_out.c_str());
      }
      return 0;
    }
    if (diff->parsed()) {
      const auto d = fl::harness::diff_suites(fl::harness::load_suite_summary(diff_old),
                                              fl::harness::load_suite_summary(diff_new), diff_opts);
      std::printf("%s", fl::harness::diff_text(d, diff_old, diff_new).c_str());
      for (const auto& e : d) {
        if (e.regression) return 1;
      }
      return 0;
    }
    if (score->parsed()) return fl::harness::score_paths(score_paths, markdown, score_json);
    if (bench_det->parsed()) return fl::harness::bench_detectors(bd);
    if (bench_rec->parsed()) return fl::harness::bench_recovery(br);
    if (suite->parsed()) {
      if (!shard.empty()) {
        fl::harness::parse_shard(shard, so.select.shard_index, so.select.shard_count);
      }
      if (!seeds.empty()) so.select.seeds = fl::harness::parse_seeds(seeds);
      if (list_only && suite_json->count() > 0) {  // --list --json [PATH]
        const auto j = fl::harness::suite_list_json(fl::harness::plan_suite(suite_path, so));
        const std::string text = j.dump(2) + "\n";
        if (so.json_path.empty()) std::printf("%s", text.c_str());
        if (!so.json_path.empty()) fl::harness::write_atomic(so.json_path, text);
        return 0;
      }
      if (list_only) {
        std::printf("%s", fl::harness::suite_list(fl::harness::plan_suite(suite_path, so)).c_str());
        return 0;
      }
      if (suite_json->count() > 0 && so.json_path.empty()) {
        throw fl::harness::UsageError(
            "--json: expected a PATH for the summary copy (without one it goes with --list)");
      }
      for (auto& d : suite_detectors) {
        so.run_args.push_back("--detector");
        so.run_args.push_back(d);
      }
      if (so.allow_shared_results) so.run_args.push_back("--allow-shared-results");
      if (!suite_recovery.empty())
        so.run_args.insert(so.run_args.end(), {"--recovery", suite_recovery});
      for (auto& kv : suite_sets) so.run_args.insert(so.run_args.end(), {"--set", kv});
      if (suite->count("--jobs") > 0) so.slurm.max_running = so.jobs;  // slurm: --array=...%N
      auto r = fl::harness::run_suite(suite_path, so);
      std::printf("%s", fl::harness::suite_table(r).c_str());
      return r.exit_code();
    }
    if (repro->parsed()) return repro_scenario(scenario_path, ro, overrides, write_html);
    if (replay->parsed()) {
      auto s = fl::harness::replay_scenario(run_dir);
      std::printf("replaying %s with plan: %s\n", run_dir.c_str(),
                  s.plans.empty() ? "(nothing fired)" : s.plans[0].c_str());
      return fl::harness::run_scenario(s, ro).exit_code;
    }
    fl::harness::LoadOptions lo{fix, overrides};
    auto s = fl::harness::load_scenario(scenario_path, lo);
    if (validate->parsed()) {
      fl::harness::check_runnable_here(s);  // what `run` would refuse, refused here first
      if (print) {
        YAML::Emitter em;
        em << s.resolved;
        std::printf("%s\n", em.c_str());
      } else {
        std::printf("%s: ok (%s, %d ranks, oracle %s)\n", scenario_path.c_str(), s.name.c_str(),
                    s.ranks, s.expect.oracle.c_str());
      }
      return 0;
    }
    ro.fix = fix;
    const auto res = fl::harness::run_scenario(s, ro);
    if (write_html && !res.run_dir.empty()) {
      std::printf("  report     %s\n", fl::harness::write_report(res.run_dir).c_str());
    }
    return res.exit_code;
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
