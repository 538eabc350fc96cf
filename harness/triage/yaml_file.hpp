// Reading triage's own YAML data files (signature tables, ranker cues and priors): every error is a
// SignatureError that names the file, line and column, so a typo in a table never drops a weight
// silently.
#pragma once

#include <set>
#include <string>

namespace YAML {
class Node;
}

namespace fl::triage {

// Throws "FILE:LINE:COL: what" at node `n`.
[[noreturn]] void fail_at(const std::string& file, const YAML::Node& n, const std::string& what);

// The file's document; "FILE: cannot read the <what>" when it cannot be opened, the parser's
// message at its line and column when it is not YAML.
YAML::Node load_yaml(const std::string& file, const std::string& what);

// The keys of map node `n` must be among `allowed`; `what` names the node in the message.
void check_keys(const std::string& file, const YAML::Node& n, const std::set<std::string>& allowed,
                const std::string& what);

}  // namespace fl::triage
