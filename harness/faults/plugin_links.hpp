// What the `hide` fault does to a rank's plugin directory, shared by the harness (one machine) and
// a host's agent (topology.hosts, HidePlugin in hide.cpp): the rank loads plugins
// from a directory of its own holding a link to each library of the plugin directory, and a
// hidden library has no link there (a node without the package).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness::faults {

// The libraries (regular files) in `plugin_dir`, sorted; none when it cannot be read.
std::vector<std::string> plugin_libraries(const std::string& plugin_dir);

// Makes `links` a directory with a link to each library of `plugin_dir`, unless it exists already.
void link_plugins(const std::string& plugin_dir, const std::string& links);

// Links `links` as above, then removes `library`'s link: {library, dir, plugin_dir, libraries}.
// Error (naming `where`, the directory and what is there) when `library` is not a plain file name
// or not a library of `plugin_dir`.
nlohmann::json hide_plugin(const std::string& plugin_dir, const std::string& links,
                           const std::string& library, const std::string& where);

// Puts `library`'s link back in `links`: {library, dir, restored (false: it was there)}.
nlohmann::json unhide_plugin(const std::string& plugin_dir, const std::string& links,
                             const std::string& library);

}  // namespace fl::harness::faults
