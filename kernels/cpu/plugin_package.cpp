// The packaged sources of a JIT build (plugin_package.hpp).
#include "kernels/cpu/plugin_package.hpp"

#include <fnmatch.h>
#include <xxhash.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "kernels/plugin.hpp"

namespace fl::ops {

FAULTLINE_SETTING(
    kJitManifest, std::string, "FAULTLINE_JIT_MANIFEST", "",
    "File-name patterns (comma- or space-separated, e.g. '*.cpp,*.h,*.hpp') of a packaged "
    "install of the plugin sources, as a MANIFEST.in selects them: a JIT build "
    "compiles from a package of the plugin's source and the project headers it "
    "includes, each kept only if a pattern matches its name (empty: from the "
    "source tree)");

namespace {
namespace fs = std::filesystem;

// The project headers a file includes with quotes, relative to the include root: resolved
// against the root first (the project's own style, "kernels/plugin.hpp"), then beside the file.
std::vector<std::string> quoted_includes(const fs::path& tree, const std::string& rel) {
  static const std::regex kInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> out;
  std::ifstream in(tree / rel);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) continue;
    const std::string inc = m[1].str();
    if (inc.find("..") != std::string::npos) continue;  // never outside the tree
    if (fs::is_regular_file(tree / inc)) {
      out.push_back(inc);
    } else {
      const std::string beside = (fs::path(rel).parent_path() / inc).generic_string();
      if (fs::is_regular_file(tree / beside)) out.push_back(beside);
    }
  }
  return out;
}

bool kept_by(const std::vector<std::string>& manifest, const std::string& rel) {
  const std::string file = fs::path(rel).filename().string();
  for (const auto& p : manifest) {
    if (::fnmatch(p.c_str(), file.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> jit_manifest() {
  std::vector<std::string> out;
  // Commas or whitespace between patterns: an env value for mpirun's app file has no spaces.
  std::string text = kJitManifest.get();
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w.find('/') != std::string::npos) {
      raise<SettingError>(
          "FAULTLINE_JIT_MANIFEST: pattern '{}' holds '/' (allowed: patterns of file names such "
          "as '*.cpp *.h *.hpp')",
          w);
    }
    out.push_back(w);
  }
  return out;
}

PluginPackage plan_package(const std::string& source, const fs::path& tree,
                           const std::vector<std::string>& extra,
                           const std::vector<std::string>& manifest, const fs::path& dir) {
  PluginPackage pkg;
  pkg.source = source;
  if (manifest.empty()) {
    pkg.root = tree;
    return pkg;
  }
  pkg.packaged = true;
  // Every file the build reads, in the order first reached: the source, the forced includes,
  // then what they include. A file left out is not followed further: nothing reads it.
  std::set<std::string> seen;
  std::deque<std::string> todo{source};
  todo.insert(todo.end(), extra.begin(), extra.end());
  while (!todo.empty()) {
    const std::string rel = todo.front();
    todo.pop_front();
    if (!seen.insert(rel).second || !fs::is_regular_file(tree / rel)) continue;
    if (!kept_by(manifest, rel)) {
      pkg.left.push_back(rel);
      continue;
    }
    pkg.kept.push_back(rel);
    for (auto& inc : quoted_includes(tree, rel)) todo.push_back(inc);
  }
  std::string content = fmt::format("{}", fmt::join(manifest, " "));
  for (const auto& rel : pkg.kept) {
    std::ifstream in(tree / rel, std::ios::binary);
    content += "\n" + rel + "\n" + std::string(std::istreambuf_iterator<char>(in), {});
  }
  pkg.root = dir / fmt::format("package-{:016x}", XXH64(content.data(), content.size(), 0));
  return pkg;
}

void stage_package(const PluginPackage& pkg, const fs::path& tree) {
  if (!pkg.packaged) return;
  std::error_code ec;
  for (const auto& rel : pkg.kept) {
    const fs::path to = pkg.root / rel;
    fs::create_directories(to.parent_path(), ec);
    fs::copy_file(tree / rel, to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      raise<PluginError>("cannot stage {} into the plugin package {}: {}", rel, pkg.root.string(),
                         ec.message());
    }
  }
}

}  // namespace fl::ops
