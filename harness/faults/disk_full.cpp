// disk_full: a directory of the run is a small filesystem (a tmpfs in the run's mount namespace):
// writes fail with ENOSPC once it fills (a checkpoint to a full disk).
#include <filesystem>

#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/run/history.hpp"
#include "harness/scenario/loader.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class DiskFullFault : public FaultOf<DiskFullFault> {
 public:
  std::string path = "checkpoints";  // run-directory relative
  int64_t bytes = 64 * 1024;
  bool mounted = false;

  nlohmann::json params() const override { return {{"path", path}, {"size_bytes", bytes}}; }
  void setup(Host& h) override {
    const std::string where = h.dir + "/" + path;
    std::filesystem::create_directories(where);
    run_tool(h.box.in_mount({"mount", "-t", "tmpfs", "-o", fmt::format("size={},mode=0755", bytes),
                             "faultline-disk-full", where}));
    mounted = true;
    h.record("disk_full", {{"path", path}, {"size_bytes", bytes}}, -1,
             fmt::format("{} is a {}-byte filesystem", path, bytes));
  }
  void heal(Host& h, bool) override {
    if (!mounted) return;
    mounted = false;
    const std::string where = h.dir + "/" + path;
    try {
      run_tool(h.box.in_mount({"umount", "-l", where}));
      h.hist.harness("fault_healed", {{"fault", "disk_full"}, {"path", where}});
    } catch (const std::exception& e) {
      try {
        h.hist.harness("heal_error", {{"fault", "disk_full"}, {"error", e.what()}});
      } catch (...) {
      }
    }
  }
};

class DiskFullKind : public FaultKind {
 public:
  std::string key() const override { return "disk_full"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].disk_full", KeyType::kSection, "",
         "A small filesystem (tmpfs) under a run directory"},
        {"faults[].disk_full.path", KeyType::kString, "checkpoints",
         "Directory relative to the run directory"},
        {"faults[].disk_full.size", KeyType::kString, "64k", "Its size (bytes; k, m, g suffixes)"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<DiskFullFault>();
    const auto n = item["disk_full"];
    f->path = loader::opt<std::string>(n, "path", "checkpoints");
    loader::check_relative(c.file, n["path"], c.at + ".disk_full.path", f->path);
    if (n["size"]) f->bytes = loader::parse_size(c.file, n["size"], c.at + ".disk_full.size");
    return f;
  }
};

}  // namespace

const FaultKind& disk_full_kind() {
  static const DiskFullKind k;
  return k;
}

}  // namespace fl::harness::faults
