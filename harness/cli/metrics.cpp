// `faultline metrics SUITE...`: suite results in Prometheus' text exposition format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "base/private_dir.hpp"
#include "harness/cli/command.hpp"
#include "harness/report/report.hpp"

namespace fl::cli {
namespace {

struct MetricsArgs {
  std::vector<std::string> dirs;
  std::string out;
};

int metrics(const MetricsArgs& a) {
  const std::string text = fl::harness::prometheus_metrics(a.dirs);
  if (a.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  // Written whole and renamed: a textfile collector never reads half a file (and a temporary of
  // a fresh name: never a symlink planted at NAME.tmp).
  fl::write_file_atomic(a.out, text);
  std::printf("%s\n", a.out.c_str());
  return 0;
}

Handler setup_metrics(CLI::App& sub) {
  auto a = std::make_shared<MetricsArgs>();
  sub.add_option("dirs", a->dirs, "Suite directories")->required();
  sub.add_option("-o,--output", a->out,
                 "File to write (e.g. for node_exporter's textfile collector; default: "
                 "standard output)");
  return [a] { return metrics(*a); };
}

}  // namespace

const Command& metrics_command() {
  static const Command c{"metrics", "Suite results as Prometheus metrics (text exposition format)",
                         setup_metrics};
  return c;
}

}  // namespace fl::cli
