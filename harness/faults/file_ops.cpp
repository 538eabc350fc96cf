#include "harness/faults/file_ops.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/counter_rng.hpp"
#include "base/error.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

std::vector<std::string> match_run_files(const std::string& dir, const std::string& glob) {
  std::vector<std::string> hits;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string rel = fs::relative(it->path(), dir).string();
    if (rel.rfind("tmp", 0) == 0 || rel.rfind(".faultline", 0) == 0) continue;
    if (it->is_regular_file() && !it->is_symlink() &&
        ::fnmatch(glob.c_str(), rel.c_str(), FNM_PATHNAME) == 0) {
      hits.push_back(rel);
    }
  }
  std::sort(hits.begin(), hits.end());
  return hits;
}

nlohmann::json damage_file(const std::string& dir, const std::string& rel,
                           const std::string& action, int64_t bytes, uint64_t seed) {
  const std::string file = dir + "/" + rel;
  const auto size = static_cast<int64_t>(fs::file_size(file));
  nlohmann::json d = {{"action", action}, {"path", rel}, {"size", size}};
  if (action == "delete") {
    fs::remove(file);
  } else if (action == "truncate") {
    const int64_t keep = std::max<int64_t>(0, size - bytes);
    fs::resize_file(file, static_cast<uintmax_t>(keep));
    d["new_size"] = keep;
  } else if (action == "corrupt") {
    // Deterministic in the scenario seed: the same bytes change in every run.
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    if (!io) raise<Error>("cannot open {} to corrupt it", file);
    std::vector<int64_t> offsets;
    for (int64_t b = 0; b < std::min(bytes, size); ++b) {
      const uint64_t r = rng::mix(seed ^ rng::hash_name(rel) ^ rng::mix(b));
      const auto off = static_cast<int64_t>(r % static_cast<uint64_t>(size));
      io.seekg(off);
      char c = 0;
      io.read(&c, 1);
      c = static_cast<char>(c ^ static_cast<char>(1 + (r >> 32) % 255));  // always changes
      io.seekp(off);
      io.write(&c, 1);
      if (offsets.size() < 16) offsets.push_back(off);
    }
    io.flush();
    d["bytes"] = std::min(bytes, size);
    d["first_offsets"] = offsets;
  } else {
    raise<Error>("file: action '{}' is not one of delete, truncate, corrupt", action);
  }
  return d;
}

}  // namespace fl::harness::faults
