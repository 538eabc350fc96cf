// `faultline campaign SPEC --seed S --runs N`: draw N scenario files from a campaign spec, run
// them through the suite executor and record each run's ground truth
// (docs/benchmarks.md#campaigns-and-shrinking).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "harness/campaign/campaign.hpp"
#include "harness/cli/command.hpp"

namespace fl::cli {
namespace {

struct CampaignArgs {
  fl::harness::campaign::Options o;
  bool quiet = false;
};

int campaign(CampaignArgs& a) {
  a.o.progress = !a.quiet;
  const auto r = fl::harness::campaign::run_campaign(a.o);
  if (a.o.no_run) {
    std::printf("generated  %d runs, every one loads (--no-run: nothing was run)\nfiles      %s\n",
                r.runs, r.dir.c_str());
    return 0;
  }
  std::printf("%s", r.text().c_str());
  // As `faultline suite`: 4 when a signal stopped it (the runs not started are `interrupted`).
  return r.interrupted.empty() ? 0 : 4;
}

Handler setup_campaign(CLI::App& sub) {
  auto a = std::make_shared<CampaignArgs>();
  sub.add_option("spec", a->o.spec, "Campaign spec (YAML)")->required();
  sub.add_option("--seed", a->o.seed, "Seed of every draw (same seed: the same files)")->required();
  sub.add_option("--runs", a->o.runs, "Runs to generate and run")->required();
  sub.add_option("-o,--out", a->o.out_dir,
                 "Campaign directory (default results/campaigns/NAME-sSEED)");
  sub.add_option("-j,--jobs", a->o.jobs, "Runs at the same time")->capture_default_str();
  sub.add_flag("--no-run", a->o.no_run, "Generate and validate the files only");
  sub.add_flag("-q,--quiet", a->quiet, "No progress lines");
  return [a] { return campaign(*a); };
}

}  // namespace

const Command& campaign_command() {
  static const Command c{"campaign",
                         "Generate seeded fault runs from a campaign spec, run them, record truth",
                         setup_campaign};
  return c;
}

}  // namespace fl::cli
