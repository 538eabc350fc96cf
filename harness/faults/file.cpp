// file: damage files of the run directory (a checkpoint shard, a data file): delete, truncate,
// or flip bytes chosen from the scenario's seed. Every damaged file is restored when the run
// heals, so the run directory is left as the job wrote it. The node of the rank's host does it
// (FileDamage, FileRestore below): this machine's in the harness's process, another host's
// through its agent (file_ops.cpp holds the damage itself).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/file_ops.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/model/placement.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

// On a node: the pristine copies of what each damage (by its tag) changed.
struct FileBackups : NodeState {
  Node& n;
  std::map<std::string, std::map<std::string, std::string>> backups;  // tag -> file -> copy
  explicit FileBackups(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
};

// A tag names a directory of backups: 1-32 letters or digits.
void check_tag(const std::string& tag) {
  bool plain = !tag.empty() && tag.size() <= 32;
  for (char c : tag) plain &= std::isalnum(static_cast<unsigned char>(c)) != 0;
  if (!plain) raise<Error>("file_damage: tag '{}' is not 1-32 letters or digits", tag);
}

nlohmann::json file_damage(Node& n, const pb::FileDamage& r) {
  check_tag(r.tag());
  const std::string& dir = n.run_dir();
  run_path(dir, r.glob(), "file_damage");  // the glob's words stay inside the run directory
  if (r.action() != "delete" && r.action() != "truncate" && r.action() != "corrupt") {
    raise<Error>("file_damage: action '{}' (allowed: delete, truncate, corrupt)", r.action());
  }
  const auto hits = match_run_files(dir, r.glob());
  if (hits.empty()) {
    raise<Error>("no file in the run directory matches '{}' (on host {})", r.glob(), n.host());
  }
  // Each damage keeps its own copies: faults heal in reverse order, so a file damaged twice ends
  // as it was before the first.
  auto& kept = n.state<FileBackups>().backups[r.tag()];
  nlohmann::json files = nlohmann::json::array();
  for (const auto& rel : hits) {
    const std::string file = dir + "/" + rel;
    if (!kept.count(file)) {
      const std::string copy =
          fmt::format("{}/.faultline/agent-{}/{}/{}", dir, n.host(), r.tag(), rel);
      fs::create_directories(fs::path(copy).parent_path());
      fs::copy_file(file, copy, fs::copy_options::overwrite_existing);
      kept[file] = copy;
    }
    files.push_back(damage_file(dir, rel, r.action(), r.bytes(), r.seed()));
  }
  return {{"files", files}, {"host", n.host()}};
}

nlohmann::json file_restore(Node& n, const pb::FileRestore& r) {
  check_tag(r.tag());
  auto& all = n.state<FileBackups>().backups;
  auto it = all.find(r.tag());
  if (it == all.end()) {
    raise<Error>("file_restore: no damage '{}' by this agent on {}; refused", r.tag(), n.host());
  }
  std::vector<std::string> restored, errors;
  for (const auto& [file, copy] : it->second) {
    std::error_code ec;
    fs::copy_file(copy, file, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      errors.push_back(fmt::format("{}: {}", file, ec.message()));
    } else {
      restored.push_back(fs::relative(file, n.run_dir()).string());
    }
    fs::remove(copy, ec);
  }
  all.erase(it);
  return {{"restored", restored}, {"errors", errors}, {"host", n.host()}};
}

std::vector<std::string> FileBackups::cleanup() {
  std::vector<std::string> lines;
  while (!backups.empty()) {
    pb::FileRestore restore;
    restore.set_tag(backups.begin()->first);
    try {
      lines.push_back("file_restore " + file_restore(n, restore).dump());
    } catch (const std::exception& e) {
      backups.erase(restore.tag());
      lines.push_back(e.what());
    }
  }
  return lines;
}

class FileFault : public FaultOf<FileFault> {
 public:
  std::string path;  // glob, run-directory relative
  std::string action = "corrupt";
  int64_t bytes = 64;

  nlohmann::json params() const override {
    return {{"path", path}, {"action", action}, {"bytes", bytes}};
  }
  bool timed() const override { return true; }

  int node = -1;    // the node that damaged the files
  std::string tag;  // names this damage to that node

  bool inject(Host& h, const Progress* p, When) override {
    if (!h.s.topo.hosts.empty()) return damage_on(h, std::max(0, host_of_rank(h.s.topo, rank)));
    if (slurm_places_ranks(h.s) && h.box.agents()) {
      // Slurm placed the ranks: the agent of the node where the rank runs (the first node's
      // without a rank), found as signal faults find it.
      if (rank < 0) return damage_on(h, 0);
      const pid_t pid = p ? p->pid_of(rank) : 0;
      if (pid == 0) return false;  // not said hello yet
      std::string why;
      const int n = locate_rank(h, rank, pid, why);
      if (n < 0) raise<Error>("file on rank {}: no agent runs it (pid {}): {}", rank, pid, why);
      return damage_on(h, n);
    }
    return damage_on(h, 0);  // this machine
  }

  // Node `n` (the rank's host, host 0 without a rank) damages the files as that host sees them,
  // keeps the copies, and puts them back when healed.
  bool damage_on(Host& h, int n) {
    node = n;
    const bool local = in_process(h, node);
    const std::string host = node_name(h, node);
    pb::FileDamage req;
    req.set_glob(path);
    req.set_action(action);
    req.set_bytes(bytes);
    req.set_seed(h.s.seed);
    req.set_tag(fmt::format("f{:x}", reinterpret_cast<uintptr_t>(this)));
    const auto r = on_node(h, node, req, "file");
    tag = req.tag();
    for (auto d : r.value("files", nlohmann::json::array())) {
      const std::string rel = d.value("path", "");
      d["via"] = local ? "local" : "agent";
      if (!local) d["host"] = host;
      h.record("file", d, rank,
               local ? fmt::format("{} {}", action, rel)
                     : fmt::format("{} {} on {}", action, rel, host));
    }
    return true;
  }

  void heal(Host& h, bool) override {
    if (tag.empty()) return;
    const bool local = in_process(h, node);
    const std::string host = node_name(h, node);
    nlohmann::json d = {{"fault", "file"}, {"via", local ? "local" : "agent"}};
    if (!local) d["host"] = host;
    try {
      auto* a = h.box.agents();
      if (!local && (!a || !a->up(node))) {
        restore_from_agent_copies(h, host);
      } else {
        pb::FileRestore req;
        req.set_tag(tag);
        const auto r = on_node(h, node, req, "file");
        for (const auto& rel : r.value("restored", std::vector<std::string>{})) {
          d["path"] = rel;
          h.hist.harness("fault_healed", d);
        }
      }
    } catch (const std::exception& e) {
      try {
        d.erase("path");
        d["error"] = e.what();
        h.hist.harness("heal_error", d);
      } catch (...) {
      }
    }
    tag.clear();
  }

  // The agent is gone: its copies are in the shared run directory (kept under
  // .faultline/agent-HOST/TAG/), so the harness puts the files back itself.
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
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::FileDamage> damage(&file_damage);
    static const NodeHandlerOf<pb::FileRestore> restore(&file_restore);
    return {&damage, &restore};
  }
};

}  // namespace

const FaultKind& file_kind() {
  static const FileKind k;
  return k;
}

}  // namespace fl::harness::faults
