// workload.command's placeholders ({rank}, {master_port}, ...): the names the loader accepts
// (harness/scenario/command_checks.cpp) and the command launcher replaces in each argument
// (harness/launch/launch_command.cpp), one argv, never a shell.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/model/scenario.hpp"

namespace fl::harness {

const std::vector<std::string>& command_placeholders() {
  static const std::vector<std::string> names = {
      "rank",        "ranks",  "local_rank", "local_ranks", "node_rank",  "nodes",  "master_addr",
      "master_port", "run_id", "run_dir",    "rank_dir",    "source_dir", "fl_ckpt"};
  return names;
}

std::string expand_command_arg(const std::string& arg,
                               const std::map<std::string, std::string>& values,
                               std::string* error) {
  std::string out;
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] != '{') {
      out += arg[i];
      continue;
    }
    if (i + 1 < arg.size() && arg[i + 1] == '{') {  // "{{" is a literal brace
      out += '{';
      ++i;
      continue;
    }
    const size_t close = arg.find('}', i);
    const std::string name = close == std::string::npos ? "" : arg.substr(i + 1, close - i - 1);
    const auto it = values.find(name);
    if (it == values.end()) {
      std::string allowed;
      for (const auto& n : command_placeholders())
        allowed += (allowed.empty() ? "{" : ", {") + n + "}";
      if (error) {
        *error =
            fmt::format("'{}': unknown placeholder '{}' (allowed: {}; '{{{{' for a brace)", arg,
                        arg.substr(i, close == std::string::npos ? 1 : close - i + 1), allowed);
      }
      return "";
    }
    out += it->second;
    i = close;
  }
  return out;
}

}  // namespace fl::harness
