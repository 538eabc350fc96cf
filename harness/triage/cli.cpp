#include "harness/triage/cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "harness/triage/eval.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

struct CliOptions {
  std::string file = "-", signatures, taxonomy;
  size_t limit_mb = 16;
  EvalOptions eval;
};

Command::Command(CLI::App& sub) : sub_(&sub), o_(std::make_shared<CliOptions>()) {
  sub_->add_option("file", o_->file, "Issue text or log (- or none: standard input)");
  sub_->add_option("--signatures", o_->signatures,
                   "Signature folder (default: $FAULTLINE_TRIAGE_SIGNATURES or the source tree's)");
  sub_->add_option("--taxonomy", o_->taxonomy, "Taxonomy file (default: scenarios/taxonomy.yaml)");
  sub_->add_option("--limit-mb", o_->limit_mb, "Read at most this many MiB (the tail)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub_->add_option("--eval", o_->eval.corpus, "Evaluate on a labelled corpus (issues.jsonl)");
  sub_->add_option("--split", o_->eval.split, "Corpus split for --eval")
      ->check(CLI::IsMember({"tune", "test", "all"}))
      ->capture_default_str();
  sub_->add_option("--min-top1", o_->eval.min_top1, "--eval fails below this top-1 %");
  sub_->add_option("--min-top3", o_->eval.min_top3, "--eval fails below this top-3 %");
  sub_->add_option("--min-stage", o_->eval.min_stage, "--eval fails below this stage %");
  sub_->add_option("--min-root-cause", o_->eval.min_root_cause, "--eval fails below this %");
  sub_->add_flag("-v,--verbose", o_->eval.verbose, "--eval: one line per issue");
}

bool Command::parsed() const {
  return sub_->parsed();
}

int Command::run() const {
  try {
    const auto tables =
        load_tables(o_->signatures.empty() ? default_signature_dir() : o_->signatures,
                    o_->taxonomy.empty() ? default_taxonomy_path() : o_->taxonomy);
    if (!o_->eval.corpus.empty()) return run_eval(tables, o_->eval);
    const size_t limit = o_->limit_mb << 20;
    Input in;
    if (o_->file == "-") {
      in = read_input(std::cin, limit);
    } else {
      std::ifstream f(o_->file, std::ios::binary);
      if (!f) {
        std::fprintf(stderr, "faultline triage: %s: cannot open\n", o_->file.c_str());
        return 2;
      }
      in = read_input(f, limit);
    }
    const auto r = triage(in, tables);
    std::printf("%s", format_result(r, tables).c_str());
    if (r.kind == Result::Kind::kBinary) return 2;
    return r.kind == Result::Kind::kFound ? 0 : 1;
  } catch (const SignatureError& e) {
    std::fprintf(stderr, "faultline triage: %s\n", e.what());
    return 2;
  }
}

}  // namespace fl::triage
