#include "harness/triage/cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "harness/triage/draft_check.hpp"
#include "harness/triage/eval.hpp"
#include "harness/triage/report_json.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

struct CliOptions {
  std::string file = "-", signatures, taxonomy, ranker;
  size_t limit_mb = 16;
  std::string write;
  bool force = false, run = false, json = false;
  bool no_drafts = false;  // --eval: rank only (cross-validation needs no drafts)
  int max_ranks = 8;
  Repro repro;
  EvalOptions eval;
};

Command::Command(CLI::App& sub) : sub_(&sub), o_(std::make_shared<CliOptions>()) {
  sub_->add_option("file", o_->file, "Issue text or log (- or none: standard input)");
  sub_->add_option("--signatures", o_->signatures,
                   "Signature folder (default: $FAULTLINE_TRIAGE_SIGNATURES or the source tree's)");
  sub_->add_option("--taxonomy", o_->taxonomy, "Taxonomy file (default: scenarios/taxonomy.yaml)");
  sub_->add_option("--ranker", o_->ranker,
                   "Ranker folder, cues.yaml + priors.yaml (default: $FAULTLINE_TRIAGE_RANKER or "
                   "the source tree's; none: the signature tables alone)");
  sub_->add_option("--limit-mb", o_->limit_mb, "Read at most this many MiB (the tail)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub_->add_option("--write", o_->write, "Save the drafted scenario to this file (a new one)");
  sub_->add_flag("--force", o_->force, "--write replaces an existing file");
  sub_->add_flag("--run", o_->run, "Run `faultline repro` on the drafted scenario");
  sub_->add_flag("--json", o_->json,
                 "Print the report as one JSON object (docs/triage.md gives its members)");
  sub_->add_option("--max-ranks", o_->max_ranks, "Clamp the draft's world to this many ranks")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub_->add_option("--eval", o_->eval.corpus, "Evaluate on a labelled corpus (issues.jsonl)");
  sub_->add_option("--eval-repro", o_->eval.repro_max,
                   "--eval: run repro on up to N drafts that express their cause");
  sub_->add_option("--split", o_->eval.split,
                   "Corpus split for --eval (dev: the dev file, harness/triage/corpus/dev.jsonl)")
      ->check(CLI::IsMember({"tune", "test", "dev", "all"}))
      ->capture_default_str();
  sub_->add_option("--min-top1", o_->eval.min_top1, "--eval fails below this top-1 %");
  sub_->add_option("--min-top3", o_->eval.min_top3, "--eval fails below this top-3 %");
  sub_->add_option("--min-stage", o_->eval.min_stage, "--eval fails below this stage %");
  sub_->add_option("--min-root-cause", o_->eval.min_root_cause, "--eval fails below this %");
  sub_->add_option("--min-drafts", o_->eval.min_drafts,
                   "--eval fails when fewer of its answers than this % have a drafted scenario");
  sub_->add_flag("-v,--verbose", o_->eval.verbose, "--eval: one line per issue");
  sub_->add_flag("--no-drafts", o_->no_drafts,
                 "--eval: rank only, without drafting and validating scenarios (about 5x faster)");
}

void Command::set_repro(Repro repro) {
  o_->repro = std::move(repro);
}

namespace {

Draft make_draft(const CliOptions& o, const Result& r, const Input& in, const Tables& t) {
  DraftOptions d_opts{o.max_ranks, o.file == "-" ? "standard input" : o.file};
  return draft_scenario(r, in.text, t, load_scenario_sources(default_scenario_dirs()),
                        harness_validator(), d_opts);
}

// --write: "" when saved (or not asked for), else why not.
std::string write_if_asked(const CliOptions& o, const Draft& d) {
  if (o.write.empty()) return {};
  if (!d.made) return "no drafted scenario to write";
  if (const auto err = write_draft(o.write, d.yaml, o.force); !err.empty()) return "--write " + err;
  return {};
}

// The draft of an answer: printed first, so that a refused --write loses nothing.
int draft_and_run(const CliOptions& o, const Result& r, const Input& in, const Tables& t) {
  const Draft d = make_draft(o, r, in, t);
  std::printf("%s", format_draft(d).c_str());
  std::fflush(stdout);
  if (!d.made) {
    if (o.write.empty() && !o.run) return 0;
    std::fprintf(stderr, "faultline triage: no drafted scenario to %s\n",
                 o.write.empty() ? "run" : "write");
    return 2;
  }
  std::string path = o.write;
  if (const auto err = write_if_asked(o, d); !err.empty()) {
    std::fprintf(stderr, "faultline triage: %s\n", err.c_str());
    return 2;
  }
  if (!path.empty()) std::printf("wrote %s\n", path.c_str());
  if (!o.run) return 0;
  if (path.empty()) path = write_draft_temp(d.yaml, "run");
  std::printf("running: faultline repro %s\n", path.c_str());
  std::fflush(stdout);
  return o.repro(path, false).exit_code;
}

int print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump(2).c_str());
  return j.value("exit_status", 2);
}

// --json: the report, the draft and the exit status in one object on standard output.
int report_as_json(const CliOptions& o, Result& r, const Input& in, const Tables& t) {
  nlohmann::ordered_json j = result_json(r, t, in, o.file == "-" ? "standard input" : o.file);
  if (r.kind != Result::Kind::kFound) return print_json(j);
  const Draft d = make_draft(o, r, in, t);
  j.update(draft_json(d));
  if (const auto err = write_if_asked(o, d); !err.empty()) {
    j["write_error"] = err;
    j["exit_status"] = 2;
    j["exit_meaning"] = exit_meaning(2);
  } else if (!o.write.empty()) {
    j["wrote"] = o.write;
  }
  return print_json(j);
}

}  // namespace

bool Command::parsed() const {
  return sub_->parsed();
}

int Command::run() const {
  const auto fail = [&](const std::string& why) {
    if (o_->json) return print_json(error_json(why, 2));
    std::fprintf(stderr, "faultline triage: %s\n", why.c_str());
    return 2;
  };
  if (o_->json && (o_->run || !o_->eval.corpus.empty()))
    return fail("--json prints a report; it does not combine with --run or --eval");
  if (o_->no_drafts && o_->eval.corpus.empty()) return fail("--no-drafts needs --eval");
  if (o_->no_drafts && o_->eval.repro_max > 0)
    return fail("--no-drafts leaves --eval-repro no drafts");
  try {
    const auto tables =
        load_tables(o_->signatures.empty() ? default_signature_dir() : o_->signatures,
                    o_->taxonomy.empty() ? default_taxonomy_path() : o_->taxonomy,
                    o_->ranker.empty() ? default_ranker_dir() : o_->ranker);
    if (!o_->eval.corpus.empty()) {
      EvalOptions e = o_->eval;
      if (!o_->no_drafts) e.validate = harness_validator();
      e.repro = o_->repro;
      return run_eval(tables, e);
    }
    const size_t limit = o_->limit_mb << 20;
    Input in;
    if (o_->file == "-") {
      in = read_input(std::cin, limit);
    } else {
      std::ifstream f(o_->file, std::ios::binary);
      if (!f) return fail(o_->file + ": cannot open");
      in = read_input(f, limit);
    }
    auto r = triage(in, tables);
    dialect::annotate(r, dialect::load_scenario_refs(default_scenario_dirs()));
    if (o_->json) return report_as_json(*o_, r, in, tables);
    std::printf("%s", format_result(r, tables).c_str());
    if (r.kind == Result::Kind::kBinary) return 2;
    if (r.kind != Result::Kind::kFound) return 1;
    return draft_and_run(*o_, r, in, tables);
  } catch (const SignatureError& e) {
    return fail(e.what());
  }
}

}  // namespace fl::triage
