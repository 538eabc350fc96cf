// file: damage files of the run directory (a checkpoint shard, a data file): delete, truncate,
// or flip bytes chosen from the scenario's seed. Every damaged file is restored when the run
// heals, so the run directory is left as the job wrote it. With topology.hosts the agent of the
// rank's host does it (file_ops.cpp holds what both do).
#include <algorithm>
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/file_ops.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;

class FileFault : public FaultOf<FileFault> {
 public:
  std::string path;  // glob, run-directory relative
  std::string action = "corrupt";
  int64_t bytes = 64;
  std::map<std::string, std::string> backups;  // damaged file -> pristine copy

  nlohmann::json params() const override {
    return {{"path", path}, {"action", action}, {"bytes", bytes}};
  }
  bool timed() const override { return true; }

  int node = -1;    // the host (launcher srun: the node) whose agent damaged the files
  std::string tag;  // names this damage to that agent

  bool inject(Host& h, const Progress* p, When) override {
    if (!h.s.topo.hosts.empty()) return inject_on_host(h, std::max(0, host_of_rank(h.s, rank)));
    if (slurm_places_ranks(h.s) && h.box.agents()) {
      // Slurm placed the ranks: the agent of the node where the rank runs (the first node's
      // without a rank), found as signal faults find it.
      if (rank < 0) return inject_on_host(h, 0);
      const pid_t pid = p ? p->pid_of(rank) : 0;
      if (pid == 0) return false;  // not said hello yet
      std::string why;
      const int n = locate_rank(h, rank, pid, why);
      if (n < 0) raise<Error>("file on rank {}: no agent runs it (pid {}): {}", rank, pid, why);
      return inject_on_host(h, n);
    }
    const auto hits = match_run_files(h.dir, path);
    if (hits.empty()) raise<Error>("no file in the run directory matches '{}'", path);
    for (const auto& hit : hits) damage(h, hit);
    return true;
  }

  // topology.hosts: the agent of `rank`'s host (host 0 without a rank) damages the files as that
  // host sees them, keeps the copies, and puts them back when healed (agent_faults.cpp).
  bool inject_on_host(Host& h, int n) {
    node = n;
    const std::string host = node_name(h, node);
    auto& a = agent_for(h, node, "file");
    HostFaultOp op{"file_damage"};
    op.path = path;
    op.action = action;
    op.bytes = bytes;
    op.seed = h.s.seed;
    op.tag = fmt::format("f{:x}", reinterpret_cast<uintptr_t>(this));
    const auto r = a.host_fault(node, op);
    tag = op.tag;
    for (auto d : r.value("files", nlohmann::json::array())) {
      const std::string rel = d.value("path", "");
      d["via"] = "agent";
      d["host"] = host;
      h.record("file", d, rank, fmt::format("{} {} on {}", action, rel, host));
    }
    return true;
  }

  void heal(Host& h, bool) override {
    if (!tag.empty()) {
      const std::string host = node_name(h, node);
      try {
        auto* a = h.box.agents();
        if (!a || !a->up(node)) {
          restore_from_agent_copies(h, host);
          tag.clear();
          return heal_local(h);
        }
        HostFaultOp op{"file_restore"};
        op.tag = tag;
        const auto r = a->host_fault(node, op);
        for (const auto& rel : r.value("restored", std::vector<std::string>{})) {
          h.hist.harness("fault_healed",
                         {{"fault", "file"}, {"path", rel}, {"via", "agent"}, {"host", host}});
        }
      } catch (const std::exception& e) {
        try {
          h.hist.harness("heal_error", {{"fault", "file"}, {"host", host}, {"error", e.what()}});
        } catch (...) {
        }
      }
      tag.clear();
    }
    heal_local(h);
  }

  // The agent is gone: its copies are in the shared run directory (agent_faults.cpp keeps them
  // under .faultline/agent-HOST/TAG/), so the harness puts the files back itself.
  void restore_from_agent_copies(Host& h, const std::string& host) {
    const fs::path root = fs::path(h.dir) / ".faultline" / ("agent-" + host) / tag;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      raise<Error>("the agent of host {} is gone and its copies are not in {} (not shared)", host,
                   root.string());
    }
    for (auto it = fs::recursive_directory_iterator(root, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (!it->is_regular_file() || it->is_symlink()) continue;
      const std::string rel = fs::relative(it->path(), root).string();
      fs::copy_file(it->path(), h.dir + "/" + rel, fs::copy_options::overwrite_existing);
      h.hist.harness("fault_healed", {{"fault", "file"},
                                      {"path", rel},
                                      {"via", "harness"},
                                      {"host", host},
                                      {"note", "the agent is gone: from its copies"}});
    }
  }

  void heal_local(Host& h) {
    for (auto& [file, backup] : backups) {
      try {
        fs::copy_file(backup, file, fs::copy_options::overwrite_existing);
        h.hist.harness(
            "fault_healed",
            {{"fault", "file"}, {"path", fs::relative(file, h.dir).string()}, {"via", "local"}});
      } catch (const std::exception& e) {
        try {
          h.hist.harness("heal_error", {{"fault", "file"}, {"error", e.what()}});
        } catch (...) {
        }
      }
      std::error_code ec;
      fs::remove(backup, ec);
    }
    backups.clear();
  }

 private:
  void damage(Host& h, const std::string& rel) {
    const std::string file = h.dir + "/" + rel;
    // Each fault keeps its own copies: faults heal in reverse order, so a file damaged twice
    // ends as it was before the first.
    const std::string backup =
        fmt::format("{}/.faultline/backup/{}/{}", h.dir, fmt::ptr(this), rel);
    if (!backups.count(file)) {
      fs::create_directories(fs::path(backup).parent_path());
      fs::copy_file(file, backup, fs::copy_options::overwrite_existing);
      backups[file] = backup;
    }
    auto d = damage_file(h.dir, rel, action, bytes, h.s.seed);
    d["via"] = "local";
    h.record("file", d, rank, fmt::format("{} {}", action, rel));
  }
};

class FileKind : public FaultKind {
 public:
  std::string key() const override { return "file"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].file", KeyType::kSection, "", "Damage files in the run directory"},
        {"faults[].file.path", KeyType::kString, "",
         "Glob relative to the run directory (e.g. checkpoints/step_*/shard_r1*.bin)"},
        {"faults[].file.action",
         KeyType::kEnum,
         "corrupt",
         "delete, truncate (drop the last `bytes`) or corrupt (`bytes` random bytes)",
         {"delete", "truncate", "corrupt"}},
        {"faults[].file.bytes", KeyType::kInt, "64", "Bytes truncated or corrupted", {}, 1, 1e12}};
  }
  std::vector<When> allowed_at() const override {
    return {When::kLaunch, When::kStep, When::kExit};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<FileFault>();
    const auto n = item["file"];
    f->path = loader::opt<std::string>(n, "path", "");
    f->action = loader::opt<std::string>(n, "action", "corrupt");
    f->bytes = loader::opt<int64_t>(n, "bytes", 64);
    loader::check_relative(c.file, n["path"], c.at + ".file.path", f->path);
    if (slurm_places_ranks(c.s) && item["rank"] && item["rank"].as<int>() >= 0 && item["at"] &&
        item["at"].as<std::string>() != "step") {
      loader::fail_at(c.file, item["at"], c.at + ".at",
                      needs_rank_node("file on one rank at " + item["at"].as<std::string>(),
                                      "its node's agent is found through the running rank "
                                      "(allowed: at: step, or leave rank out)"));
    }
    return f;
  }
};

}  // namespace

const FaultKind& file_kind() {
  static const FileKind k;
  return k;
}

}  // namespace fl::harness::faults
