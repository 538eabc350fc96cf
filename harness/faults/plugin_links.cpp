#include "harness/faults/plugin_links.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {

void check_library(const std::string& library, const std::string& where) {
  if (library.empty() || library == "." || library == ".." ||
      library.find('/') != std::string::npos) {
    raise<Error>("hide on {}: library '{}' is not a file name of the plugin directory", where,
                 library);
  }
}

}  // namespace

std::vector<std::string> plugin_libraries(const std::string& plugin_dir) {
  std::vector<std::string> have;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(plugin_dir, ec)) {
    if (e.is_regular_file()) have.push_back(e.path().filename().string());
  }
  std::sort(have.begin(), have.end());
  return have;
}

void link_plugins(const std::string& plugin_dir, const std::string& links) {
  if (fs::exists(links)) return;
  fs::create_directories(links);
  for (const auto& name : plugin_libraries(plugin_dir)) {
    fs::create_symlink(fs::absolute(fs::path(plugin_dir) / name), fs::path(links) / name);
  }
}

nlohmann::json hide_plugin(const std::string& plugin_dir, const std::string& links,
                           const std::string& library, const std::string& where) {
  check_library(library, where);
  const auto have = plugin_libraries(plugin_dir);
  if (!std::binary_search(have.begin(), have.end(), library)) {
    raise<Error>("hide on {}: no library '{}' in the plugin directory {} (there: {})", where,
                 library, plugin_dir,
                 have.empty() ? "nothing" : fmt::format("{}", fmt::join(have, ", ")));
  }
  link_plugins(plugin_dir, links);
  fs::remove(fs::path(links) / library);
  return {{"library", library}, {"dir", links}, {"plugin_dir", plugin_dir}, {"libraries", have}};
}

nlohmann::json unhide_plugin(const std::string& plugin_dir, const std::string& links,
                             const std::string& library) {
  check_library(library, "unhide");
  const fs::path link = fs::path(links) / library;
  std::error_code ec;
  const bool there = fs::is_symlink(fs::symlink_status(link, ec));
  if (!there) fs::create_symlink(fs::absolute(fs::path(plugin_dir) / library), link);
  return {{"library", library}, {"dir", links}, {"restored", !there}};
}

}  // namespace fl::harness::faults
