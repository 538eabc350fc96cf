// topology.deepspeed: the arguments of DeepSpeed's runner for `launcher: deepspeed`
// (docs/cluster.md). What the runner itself rejects (a bad hostfile line, an unknown host in
// --include) is not a config error: the run reproduces it, with the runner's own words. Here only
// what the scenario file alone gets wrong: runner options without the deepspeed launcher, and a
// topology.ranks that differs from the world the runner would start.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "harness/launch/ds_runner.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {

namespace fs = std::filesystem;

// The hostfile's lines as fl-ds-runner will read them; false when it has none to read (a missing
// file: the runner warns and uses local resources).
bool hostfile_lines(const Topology::Deepspeed& d, std::vector<std::string>& lines) {
  std::string text = d.hostfile_text;
  if (text.empty() && !d.hostfile.empty()) {
    std::ifstream in(d.hostfile);
    if (!in) return false;
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (text.empty() && d.hostfile.empty()) return false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return true;
}

// The world the runner would start, or -1 when it would fail (the run shows how).
int runner_world_size(const Scenario& s, const YAML::Node& root) {
  const auto& d = s.topo.deepspeed;
  ds::RunnerArgs a;
  a.has_hostfile = hostfile_lines(d, a.hostfile);
  a.include = d.include;
  a.exclude = d.exclude;
  a.num_nodes = d.num_nodes;
  a.num_gpus = d.num_gpus;
  a.device_count = d.device_count > 0 ? d.device_count : s.topo.ranks;
  a.version = d.version;
  if (root["env"] && root["env"]["CUDA_VISIBLE_DEVICES"]) {
    a.visible_devices = root["env"]["CUDA_VISIBLE_DEVICES"].as<std::string>();
  }
  try {
    std::vector<std::string> printed;
    const auto layout = ds::launch_layout(ds::resolve_world(a, printed));
    return static_cast<int>(layout.size());
  } catch (const ds::RunnerError&) {
    return -1;
  }
}

}  // namespace

void parse_deepspeed(const std::string& file, const YAML::Node& doc, const YAML::Node& root,
                     Scenario& s) {
  const YAML::Node t = root["topology"]["deepspeed"];
  const YAML::Node raw = doc["topology"] ? doc["topology"] : YAML::Node();
  auto& d = s.topo.deepspeed;
  const std::string hostfile = t["hostfile"].as<std::string>();
  if (hostfile.find('\n') != std::string::npos) {
    d.hostfile_text = hostfile;
  } else if (!hostfile.empty()) {
    const fs::path hp(hostfile);
    d.hostfile = (hp.is_absolute() ? hp : fs::absolute(fs::path(file).parent_path() / hp))
                     .lexically_normal()
                     .string();
    YAML::Node r = root;  // the resolved scenario (RUN_DIR/scenario.yaml) names it absolutely
    r["topology"]["deepspeed"]["hostfile"] = d.hostfile;
  }
  d.include = t["include"].as<std::string>();
  d.exclude = t["exclude"].as<std::string>();
  d.num_nodes = t["num_nodes"].as<int>();
  d.num_gpus = t["num_gpus"].as<int>();
  d.device_count = t["device_count"].as<int>();
  d.version = t["version"].as<std::string>();
  ErrorCollector::check([&] {
    if (!ds::version_ok(d.version)) {
      fail_at(file, raw["deepspeed"] ? raw["deepspeed"]["version"] : raw,
              "topology.deepspeed.version",
              fmt::format("'{}' is not a version (allowed: latest or MAJOR.MINOR.PATCH, e.g. "
                          "0.14.0)",
                          d.version));
    }
  });
  const bool given = raw["deepspeed"].IsDefined() && !raw["deepspeed"].IsNull();
  if (s.topo.launcher != "deepspeed") {
    ErrorCollector::check([&] {
      if (given) {
        fail_at(file, raw["deepspeed"], "topology.deepspeed",
                fmt::format("the runner's options need topology.launcher: deepspeed (got {})",
                            s.topo.launcher));
      }
    });
    // The resolved scenario (RUN_DIR/scenario.yaml, which replay and verdict load again) keeps
    // the section only for the launcher that reads it: its defaults would read as given.
    YAML::Node r = root;
    r["topology"].remove("deepspeed");
    return;
  }
  const int world = runner_world_size(s, root);
  if (world < 0) return;
  if (!raw["ranks"]) {
    s.topo.ranks = world;
    YAML::Node r = root;
    r["topology"]["ranks"] = world;
    return;
  }
  ErrorCollector::check([&] {
    if (world != s.topo.ranks) {
      fail_at(file, raw["ranks"], "topology.ranks",
              fmt::format("topology.ranks is {} but DeepSpeed's runner starts {} process(es) from "
                          "topology.deepspeed (allowed: {}, or leave ranks out)",
                          s.topo.ranks, world, world));
    }
  });
}

}  // namespace fl::harness::loader
