// A packaged install of the kernel plugins' sources, as a framework's wheel or sdist ships its op
// sources for JIT builds (DeepSpeed's csrc under deepspeed/ops, chosen by MANIFEST.in). With
// FAULTLINE_JIT_MANIFEST set, a JIT build compiles from a package staged in its build directory:
// the plugin's source and every project header it reaches through `#include "..."`, each kept only
// when its file name matches one of the manifest's patterns. A header the manifest leaves out is
// missing from the package, and the compiler says so in its own words (DeepSpeed PR #5522: the
// .hpp headers were not packaged and the JIT build of fused_adam failed). Unset: the build compiles
// from the source tree itself.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/settings.hpp"

namespace fl::ops {

FAULTLINE_SETTING(
    kJitManifest, std::string, "FAULTLINE_JIT_MANIFEST", "",
    "File-name patterns (comma- or space-separated, e.g. '*.cpp,*.h,*.hpp') of a packaged "
    "install of the plugin sources, as a MANIFEST.in selects them: a JIT build "
    "compiles from a package of the plugin's source and the project headers it "
    "includes, each kept only if a pattern matches its name (empty: from the "
    "source tree)");

struct PluginPackage {
  std::filesystem::path root;     // the staged include root (-I) or, unpackaged, the tree's
  std::filesystem::path source;   // the plugin's source, relative to root
  std::vector<std::string> kept;  // files staged, relative to the root
  bool packaged = false;
};

// The manifest's patterns (FAULTLINE_JIT_MANIFEST, fnmatch patterns of file names separated by
// commas or spaces); empty when unset. Throws SettingError for a pattern holding '/' (it names a
// file, not a path).
std::vector<std::string> jit_manifest();

// What a JIT build compiles: `source` is the plugin's source and `extra` more files the build
// reads, both relative to `tree`, the source tree's include root. Without a manifest the tree
// itself; with one the package that `stage_package` writes under `dir` (its content decides the
// folder's name). Reads files only; PluginError when `source` is not under `tree`.
PluginPackage plan_package(const std::string& source, const std::filesystem::path& tree,
                           const std::vector<std::string>& extra,
                           const std::vector<std::string>& manifest,
                           const std::filesystem::path& dir);

// Copies the kept files into pkg.root unless it exists, through a temporary folder renamed into
// place, so a package folder is always whole. Throws PluginError when a copy fails.
void stage_package(const PluginPackage& pkg, const std::filesystem::path& tree);

}  // namespace fl::ops
