#include "harness/score/dataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "harness/history/history.hpp"
#include "harness/run/runner.hpp"
#include "harness/score/score.hpp"
#include "harness/score/sha256.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

// What a run directory holds that a dataset carries: the resolved scenario, the history, the
// verdict and plan, and everything under ranks/ (events, output, Flight Recorder dumps). Never
// the control-plane secret, sockets or the tools' logs (a detector's output is not data).
bool exported(const fs::path& rel) {
  static const std::set<std::string> top = {"scenario.yaml", "history.jsonl", "verdict.json",
                                            "fault-plan.txt", "fired.jsonl"};
  const std::string first = rel.begin()->string();
  if (first == "ranks") return true;
  return std::distance(rel.begin(), rel.end()) == 1 && top.count(first) > 0;
}

nlohmann::json ns_to_s(int64_t ns) {
  return ns < 0 ? nlohmann::json(nullptr) : nlohmann::json(static_cast<double>(ns) / 1e9);
}

// Copies the run's files into `dst`; returns their paths relative to `dst`.
std::vector<std::string> copy_run(const fs::path& src, const fs::path& dst) {
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(src); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path rel = fs::relative(it->path(), src);
    if (it->is_symlink() || !(it->is_regular_file() || it->is_directory())) continue;
    if (!exported(rel)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) {
      fs::create_directories(dst / rel);
    } else {
      fs::create_directories((dst / rel).parent_path());
      fs::copy_file(it->path(), dst / rel);
      files.push_back(rel.string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string unique_id(const std::string& dir, std::set<std::string>& taken) {
  const std::string base = fs::path(dir).filename().string();
  std::string id = base;
  for (int k = 2; !taken.insert(id).second; ++k) id = fmt::format("{}-{}", base, k);
  return id;
}

nlohmann::json run_line(const std::string& id, const std::string& src, const nlohmann::json& gt) {
  nlohmann::json j = {{"id", id}, {"source", fs::absolute(src).string()}};
  for (const char* k : {"scenario", "class", "why", "symptom", "stage", "fix", "seed", "world",
                        "duration_s", "injected_s", "manifested_s", "ranks", "detectors"}) {
    j[k] = gt.value(k, nlohmann::json(nullptr));
  }
  return j;
}

}  // namespace

nlohmann::json run_ground_truth(const std::string& run_dir) {
  const RunTruth t = load_run_truth(run_dir);
  nlohmann::json faults = nlohmann::json::array(), start = nlohmann::json::object();
  static const std::set<std::string> truth = {"fault_armed",    "fault_fired",  "faults_armed",
                                              "fault_injected", "fault_healed", "fault_failed"};
  for (const auto& e : read_history(run_dir + "/history.jsonl")) {
    if (e.kind == "run_start") start = nlohmann::json::parse(e.data_json, nullptr, false);
    if (!truth.count(e.kind)) continue;
    faults.push_back({{"kind", e.kind},
                      {"t_s", ns_to_s(e.t_ns)},
                      {"rank", e.rank},
                      {"step", e.step},
                      {"data", nlohmann::json::parse(e.data_json, nullptr, false)}});
  }
  if (start.is_discarded()) start = nlohmann::json::object();
  nlohmann::json verdict = nullptr;
  if (auto v = read_json_file(run_dir + "/verdict.json")) verdict = *v;
  return {{"schema_version", kDatasetSchemaVersion},
          {"scenario", t.scenario},
          {"class", t.cls},
          {"why", t.why},
          {"symptom", t.symptom},
          {"stage", t.stage},
          {"fix", t.fix},
          {"seed", start.value("seed", nlohmann::json(nullptr))},
          {"world", start.value("ranks", nlohmann::json(nullptr))},
          {"expect", start.value("expect", nlohmann::json(nullptr))},
          {"duration_s", t.duration_s()},
          {"launched_s", ns_to_s(t.t_launch_ns)},
          {"injected_s", ns_to_s(t.t_inject_ns)},
          {"manifested_s", ns_to_s(t.t_manifest_ns)},
          {"ranks", t.ranks},
          {"detectors", t.detectors},
          {"verdict", verdict},
          {"faults", faults}};
}

int export_dataset(const ExportOptions& o) {
  if (o.out.empty()) raise<ConfigError>("export: -o DIR is required");
  if (fs::exists(fs::symlink_status(o.out))) {
    raise<ConfigError>(
        "export: {} exists; an export writes a new directory and never overwrites "
        "one (remove it or choose another -o)",
        o.out);
  }
  const auto dirs = collect_run_dirs(o.paths);
  const fs::path out = fs::absolute(o.out);
  const fs::path tmp =
      out.parent_path() / fmt::format(".{}.partial-{}", out.filename().string(), ::getpid());
  fs::create_directories(tmp / "runs");
  std::set<std::string> taken;
  std::string runs_jsonl;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& d : dirs) {
    const std::string id = unique_id(d, taken);
    const fs::path dst = tmp / "runs" / id;
    std::vector<std::string> copied = copy_run(d, dst);
    const nlohmann::json gt = run_ground_truth(d);
    write_atomic((dst / "ground_truth.json").string(), gt.dump(2) + "\n");
    copied.push_back("ground_truth.json");
    runs_jsonl += run_line(id, d, gt).dump() + "\n";
    for (const auto& f : copied) {
      const fs::path p = dst / f;
      files.push_back({{"path", fmt::format("runs/{}/{}", id, f)},
                       {"bytes", fs::file_size(p)},
                       {"sha256", sha256_file_hex(p.string())}});
    }
  }
  write_atomic((tmp / "runs.jsonl").string(), runs_jsonl);
  files.push_back(
      {{"path", "runs.jsonl"}, {"bytes", runs_jsonl.size()}, {"sha256", sha256_hex(runs_jsonl)}});
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  nlohmann::json manifest = {
      {"schema", kDatasetSchema},
      {"schema_version", kDatasetSchemaVersion},
      {"created_utc", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(now))},
      {"sources", o.paths},
      {"runs", dirs.size()},
      {"files", files}};
  write_atomic((tmp / "manifest.json").string(), manifest.dump(2) + "\n");
  // Whole or not at all: the directory appears under its name only once complete.
  fs::rename(tmp, out);
  return static_cast<int>(dirs.size());
}

std::vector<std::string> dataset_runs(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  std::string why;
  auto m = read_json_file(mpath, &why);
  if (!m) raise<ConfigError>("{}: not a faultline dataset: {}", dir, why);
  if (!m->is_object() || m->value("schema", "") != kDatasetSchema) {
    raise<ConfigError>("{}: \"schema\" is not \"{}\"", mpath, kDatasetSchema);
  }
  const int v = m->value("schema_version", 0);
  if (v < 1 || v > kDatasetSchemaVersion) {
    raise<ConfigError>("{}: schema_version {} is not one this build reads (1 to {})", mpath, v,
                       kDatasetSchemaVersion);
  }
  std::vector<std::string> runs;
  std::ifstream in(dir + "/runs.jsonl");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("id") || !j["id"].is_string()) {
      raise<ConfigError>("{}/runs.jsonl:{}: not a run line (a JSON object with \"id\")", dir, n);
    }
    runs.push_back(dir + "/runs/" + j["id"].get<std::string>());
  }
  return runs;
}

}  // namespace fl::harness
