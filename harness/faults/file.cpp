// file: damage files of the run directory (a checkpoint shard, a data file): delete, truncate,
// or flip bytes chosen from the scenario's seed. Every damaged file is restored when the run
// heals, so the run directory is left as the job wrote it.
#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "base/counter_rng.hpp"
#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/run/history.hpp"
#include "harness/scenario/loader.hpp"

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

  bool inject(Host& h, const Progress*, When) override {
    const std::string& dir = h.dir;
    std::vector<std::string> hits;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string rel = fs::relative(it->path(), dir).string();
      if (rel.rfind("tmp", 0) == 0 || rel.rfind(".faultline", 0) == 0) continue;
      if (it->is_regular_file() && !it->is_symlink() &&
          ::fnmatch(path.c_str(), rel.c_str(), FNM_PATHNAME) == 0) {
        hits.push_back(rel);
      }
    }
    std::sort(hits.begin(), hits.end());
    if (hits.empty()) raise<Error>("no file in the run directory matches '{}'", path);
    for (const auto& hit : hits) damage(h, hit);
    return true;
  }

  void heal(Host& h, bool) override {
    for (auto& [file, backup] : backups) {
      try {
        fs::copy_file(backup, file, fs::copy_options::overwrite_existing);
        h.hist.harness("fault_healed",
                       {{"fault", "file"}, {"path", fs::relative(file, h.dir).string()}});
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
    const auto size = static_cast<int64_t>(fs::file_size(file));
    nlohmann::json d = {{"action", action}, {"path", rel}, {"size", size}};
    if (action == "delete") {
      fs::remove(file);
    } else if (action == "truncate") {
      const int64_t keep = std::max<int64_t>(0, size - bytes);
      fs::resize_file(file, static_cast<uintmax_t>(keep));
      d["new_size"] = keep;
    } else {
      // Deterministic in the scenario seed: the same bytes change in every run.
      std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
      std::vector<int64_t> offsets;
      for (int64_t b = 0; b < std::min(bytes, size); ++b) {
        const uint64_t r = rng::mix(h.s.seed ^ rng::hash_name(rel) ^ rng::mix(b));
        const auto off = static_cast<int64_t>(r % static_cast<uint64_t>(size));
        io.seekg(off);
        char c = 0;
        io.read(&c, 1);
        c = static_cast<char>(c ^ static_cast<char>(1 + (r >> 32) % 255));  // always changes
        io.seekp(off);
        io.write(&c, 1);
        if (offsets.size() < 16) offsets.push_back(off);
      }
      io.flush();
      d["bytes"] = std::min(bytes, size);
      d["first_offsets"] = offsets;
    }
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
    return f;
  }
};

}  // namespace

const FaultKind& file_kind() {
  static const FileKind k;
  return k;
}

}  // namespace fl::harness::faults
