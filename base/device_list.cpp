#include "base/device_list.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <xxhash.h>

namespace fl::comm {

namespace {

std::string uuid_from(const std::string& prefix, const std::string& seed) {
  const uint64_t a = XXH64(seed.data(), seed.size(), 0x9e3779b97f4a7c15ULL);
  const uint64_t b = XXH64(seed.data(), seed.size(), a);
  const std::string hex = fmt::format("{:016x}{:016x}", a, b);
  return fmt::format("{}-{}-{}-{}-{}-{}", prefix, hex.substr(0, 8), hex.substr(8, 4),
                     hex.substr(12, 4), hex.substr(16, 4), hex.substr(20, 12));
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The device `item` names, or -1.
int64_t resolve(const std::string& item, int node, int64_t per_node) {
  if (item.empty()) return -1;
  if (std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (item.size() > 9) return -1;
    const int64_t d = std::stoll(item);
    return d < per_node ? d : -1;
  }
  const bool gpu = item.rfind("GPU-", 0) == 0;
  const bool mig = item.rfind("MIG-", 0) == 0;
  if (!gpu && !mig) return -1;
  int64_t found = -1;
  for (int64_t d = 0; d < per_node; ++d) {
    const std::string u = gpu ? simulated_gpu_uuid(node, d) : simulated_mig_uuid(node, d);
    if (u.rfind(item, 0) == 0) {
      if (found >= 0) return -1;  // a prefix of two devices' UUIDs names neither
      found = d;
    }
  }
  return found;
}

}  // namespace

std::string simulated_gpu_uuid(int node, int64_t index) {
  return uuid_from("GPU", fmt::format("faultline-gpu/node{}/{}", node, index));
}

std::string simulated_mig_uuid(int node, int64_t index) {
  return uuid_from("MIG", fmt::format("faultline-mig/node{}/{}", node, index));
}

std::vector<int64_t> parse_visible_devices(const std::string& list, int node, int64_t per_node) {
  std::vector<int64_t> visible;
  size_t start = 0;
  while (start < list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const int64_t d = resolve(trim(list.substr(start, end - start)), node, per_node);
    if (d < 0 || std::find(visible.begin(), visible.end(), d) != visible.end()) break;
    visible.push_back(d);
    start = end + 1;
  }
  return visible;
}

}  // namespace fl::comm
