// hide: a library is missing on one rank (a node without the package): each rank loads plugins
// from its own directory of links to the plugin directory, and a hidden library has no link.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/scenario/loader.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;

class HideFault : public FaultOf<HideFault> {
 public:
  std::string library;
  nlohmann::json params() const override { return {{"library", library}}; }
  void setup(Host& h) override {
    std::vector<std::string> have;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(h.plugin_dir, ec)) {
      if (e.is_regular_file()) have.push_back(e.path().filename().string());
    }
    std::sort(have.begin(), have.end());
    if (std::find(have.begin(), have.end(), library) == have.end()) {
      raise<Error>("hide: no library '{}' in the plugin directory {} (there: {})", library,
                   h.plugin_dir,
                   have.empty() ? "nothing" : fmt::format("{}", fmt::join(have, ", ")));
    }
    for (int r = 0; r < h.s.ranks; ++r) {
      const fs::path d = fmt::format("{}/ranks/rank{}/plugins", h.dir, r);
      if (!fs::exists(d)) {  // the first hide fault links every library
        fs::create_directories(d);
        for (auto& name : have) {
          fs::create_symlink(fs::absolute(fs::path(h.plugin_dir) / name), d / name);
        }
      }
      if (rank >= 0 && rank != r) continue;
      fs::remove(d / library);
      h.record("hide", {{"library", library}, {"dir", d.string()}}, r,
               fmt::format("{} hidden from rank {}", library, r));
    }
  }
};

class HideKind : public FaultKind {
 public:
  std::string key() const override { return "hide"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].hide", KeyType::kString, "",
             "Hide this library from `rank`: it is left out of the rank's plugin directory"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<HideFault>();
    f->library = item["hide"].as<std::string>();
    loader::check_relative(c.file, item["hide"], c.at + ".hide", f->library);
    // The library must be one the workers have: in the plugin directory, or one this build
    // makes when that is the build's own (not built yet is not unknown). An empty directory
    // elsewhere leaves the check to the run.
    std::vector<std::string> have;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(plugin_dir(), ec)) {
      if (e.is_regular_file()) have.push_back(e.path().filename().string());
    }
    if (plugin_dir() == FAULTLINE_PLUGIN_BUILD_DIR) {
      const std::string built = FAULTLINE_PLUGIN_BUILD_LIBS;
      for (size_t at = 0; at <= built.size();) {
        const size_t comma = std::min(built.find(',', at), built.size());
        if (comma > at) have.push_back(built.substr(at, comma - at));
        at = comma + 1;
      }
    }
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    if (!have.empty() && !std::binary_search(have.begin(), have.end(), f->library)) {
      loader::fail_at(c.file, item["hide"], c.at + ".hide",
                      fmt::format("no library '{}' in the plugin directory {} (allowed: {})",
                                  f->library, plugin_dir(), fmt::join(have, ", ")));
    }
    return f;
  }
};

}  // namespace

const FaultKind& hide_kind() {
  static const HideKind k;
  return k;
}

}  // namespace fl::harness::faults
