// Formats rank lists the way people read them in error messages: "rank 3", "ranks 0-2",
// "ranks 0,2,5-7".
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace fl {

inline std::string format_rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += (j > i) ? fmt::format("{}-{}", ranks[i], ranks[j]) : fmt::format("{}", ranks[i]);
    i = j + 1;
  }
  return out;
}

// "rank 3" or "ranks 0-2".
inline std::string format_ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks);
}

}  // namespace fl
