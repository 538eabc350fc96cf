// The packaged sources of a JIT build (plugin_package.hpp).
#include "kernels/cpu/plugin_package.hpp"

#include <fnmatch.h>
#include <unistd.h>
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
    // As the compiler looks: beside the including file first, then the include root.
    const std::string beside = (fs::path(rel).parent_path() / inc).generic_string();
    if (fs::is_regular_file(tree / beside)) {
      out.push_back(beside);
    } else if (fs::is_regular_file(tree / inc)) {
      out.push_back(inc);
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
  if (out.empty() && !kJitManifest.get().empty()) {
    raise<SettingError>(
        "FAULTLINE_JIT_MANIFEST is '{}', which names no pattern (allowed: file-name patterns "
        "separated by commas or spaces, such as '*.cpp,*.h,*.hpp', or unset)",
        kJitManifest.get());
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
  if (source.empty() || source.rfind("..", 0) == 0) {
    raise<PluginError>(
        "cannot package the plugin source {}: it is not under the include root {} "
        "(FAULTLINE_PLUGIN_SRC must be <root>/kernels/plugins when FAULTLINE_JIT_MANIFEST is set)",
        source, tree.string());
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
    if (!kept_by(manifest, rel)) continue;  // not in the package: nothing reads on from it
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
  // A package's folder is named by its content and appears whole (a rename), so one that exists
  // is complete: jobs under other locks that share the cache never see a half-written copy.
  if (!pkg.packaged || fs::is_directory(pkg.root)) return;
  const fs::path tmp = pkg.root.string() + fmt::format(".tmp.{}", ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  for (const auto& rel : pkg.kept) {
    const fs::path to = tmp / rel;
    fs::create_directories(to.parent_path(), ec);
    fs::copy_file(tree / rel, to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);
      raise<PluginError>("cannot stage {} into the plugin package {}: {}", rel, pkg.root.string(),
                         ec.message());
    }
  }
  fs::rename(tmp, pkg.root, ec);
  if (ec) {  // another job's rename came first: its package has the same content
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (!fs::is_directory(pkg.root)) {
      raise<PluginError>("cannot install the plugin package {}: {}", pkg.root.string(),
                         ec.message());
    }
  }
}

}  // namespace fl::ops
