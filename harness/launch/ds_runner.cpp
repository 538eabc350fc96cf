// DeepSpeed's runner.py / launch.py resource logic (ds_runner.hpp), statement by statement.
#include "harness/launch/ds_runner.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace fl::harness::ds {

namespace {

[[noreturn]] void value_error(const std::string& what) {
  throw RunnerError("ValueError", what);
}

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Python's int(x) on a str (base 10): whitespace around, a sign, digits with single underscores
// between them; anything else is int()'s ValueError.
int python_int(const std::string& x) {
  const std::string s = strip(x);
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  bool ok = i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
  std::string digits;
  for (; ok && i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digits += s[i];
    } else if (s[i] != '_' || i + 1 >= s.size() ||
               !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      ok = false;
    }
  }
  if (!ok || digits.size() > 9) {
    value_error(fmt::format("invalid literal for int() with base 10: '{}'", x));
  }
  const int v = std::stoi(digits);
  return s[0] == '-' ? -v : v;
}

template <class Map>
auto find_host(Map& m, const std::string& host) {
  return std::find_if(m.begin(), m.end(), [&](const auto& e) { return e.first == host; });
}

// parse_node_config: "NAME" or "NAME:SLOT,SLOT"; a second ':' fails the tuple unpacking.
std::pair<std::string, std::vector<int>> parse_node_config(const std::string& config) {
  const auto colon = config.find(':');
  if (colon == std::string::npos) return {config, {}};
  if (config.find(':', colon + 1) != std::string::npos) {
    value_error("too many values to unpack (expected 2)");
  }
  std::vector<int> slots;
  for (const auto& x : split(config.substr(colon + 1), ',')) slots.push_back(python_int(x));
  return {config.substr(0, colon), slots};
}

}  // namespace

ResourcePool parse_hostfile(const std::vector<std::string>& hostfile_lines) {
  static const std::regex pattern(R"(^(\S+)\s+slots=(\d+))");
  ResourcePool pool;
  for (const auto& raw : hostfile_lines) {
    const std::string line = strip(raw);
    std::smatch m;
    const bool match = std::regex_search(line, m, pattern);
    if (line.rfind('#', 0) == 0 || line.empty()) continue;
    if (!match) {
      value_error(
          fmt::format("Hostfile contains a bad entry: {}, unable to proceed with launching", line));
    }
    const std::string host = m[1];
    if (find_host(pool, host) != pool.end()) {
      value_error(fmt::format(
          "Hostfile contains multiple entries for {}, unable to proceed with launching", host));
    }
    // int() of \d+: Python has no overflow; a count past int's range is no real hostfile.
    pool.emplace_back(host, m[2].length() > 9 ? 999999999 : std::stoi(m[2]));
  }
  if (pool.empty()) {
    value_error("Hostfile is empty or not formatted correctly, unable to proceed with launching.");
  }
  return pool;
}

ActiveResources parse_node_config_list(const std::string& list) {
  ActiveResources configs;  // a defaultdict(list) in insertion order
  for (const auto& config : split(list, '@')) {
    auto [host, slots] = parse_node_config(config);
    auto it = find_host(configs, host);
    if (it == configs.end()) {
      configs.emplace_back(host, std::vector<int>{});
      it = configs.end() - 1;
    }
    it->second.insert(it->second.end(), slots.begin(), slots.end());
  }
  for (auto& [host, slots] : configs) {
    std::set<int> unique(slots.begin(), slots.end());
    slots.assign(unique.begin(), unique.end());
  }
  return configs;
}

namespace {

// One NODE_SPEC of the filter into `filtered` (runner.py's loop body).
void apply_node_spec(const ActiveResources& host_info, const std::string& host,
                     const std::vector<int>& slots, bool include, ActiveResources& filtered) {
  const auto known = find_host(host_info, host);
  if (known == host_info.end()) {
    value_error(fmt::format("Hostname '{}' not found in hostfile", host));
  }
  auto target = find_host(filtered, host);
  if (slots.empty()) {  // the whole node
    if (target == filtered.end()) {
      filtered.emplace_back(host, std::vector<int>{});
      target = filtered.end() - 1;
    }
    target->second = include ? known->second : std::vector<int>{};
    return;
  }
  for (int slot : slots) {
    const auto& have = known->second;
    if (std::find(have.begin(), have.end(), slot) == have.end()) {
      value_error(fmt::format("No slot '{}' specified on host '{}'", slot, host));
    }
  }
  if (include) {
    if (target == filtered.end()) {
      filtered.emplace_back(host, slots);
    } else {
      target->second = slots;
    }
    return;
  }
  for (int slot : slots) {  // list.remove: the first occurrence, ValueError when gone
    auto& have = target->second;
    auto at = std::find(have.begin(), have.end(), slot);
    if (at == have.end()) value_error("list.remove(x): x not in list");
    have.erase(at);
  }
}

}  // namespace

namespace {

// Stable de-duplication, empty hosts dropped, the hostfile's order kept (the post-processing).
ActiveResources post_process(const ActiveResources& host_info, const ActiveResources& filtered) {
  ActiveResources ordered;
  for (const auto& [host, _] : host_info) {
    auto it = find_host(filtered, host);
    if (it == filtered.end()) continue;
    std::vector<int> unique;
    for (int s : it->second) {
      if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(s);
    }
    if (!unique.empty()) ordered.emplace_back(host, unique);
  }
  return ordered;
}

}  // namespace

bool version_ok(const std::string& v) {
  static const std::regex re(R"(latest|\d+\.\d+\.\d+)");
  return std::regex_match(v, re);
}

bool older_than(const std::string& v, int major, int minor, int patch) {
  if (v == "latest" || !version_ok(v)) return false;
  int a = 0, b = 0, c = 0;
  std::sscanf(v.c_str(), "%d.%d.%d", &a, &b, &c);
  return std::make_tuple(a, b, c) < std::make_tuple(major, minor, patch);
}

bool legacy_filter(const std::string& v) {
  return older_than(v, 0, 15, 2);
}

ActiveResources parse_resource_filter(const ActiveResources& host_info, const std::string& include,
                                      const std::string& exclude, bool legacy) {
  if (!include.empty() && !exclude.empty()) {
    value_error("include_str and exclude_str are mutually exclusive.");
  }
  if (include.empty() && exclude.empty()) return host_info;
  const bool inc = !include.empty();
  ActiveResources filtered = inc ? ActiveResources{} : host_info;
  const std::string& spec = inc ? include : exclude;
  if (legacy) {  // each NODE_SPEC as written, in turn
    for (const auto& config : split(spec, '@')) {
      auto [host, slots] = parse_node_config(config);
      apply_node_spec(host_info, host, slots, inc, filtered);
    }
  } else {
    for (const auto& [host, slots] : parse_node_config_list(spec)) {
      apply_node_spec(host_info, host, slots, inc, filtered);
    }
  }
  return post_process(host_info, filtered);
}

ActiveResources parse_inclusion_exclusion(const ResourcePool& pool, const std::string& include,
                                          const std::string& exclude, bool legacy) {
  // Since 0.15.2 an included host's resources are the include's own slots, so the filter's slot
  // check never fails for --include (DeepSpeed accepts `host:7` on a host with slots=2), and a
  // host included whole (`--include=node3`) has no slots at all. Before, every host had
  // range(slots).
  const auto configs = legacy ? ActiveResources{} : parse_node_config_list(include);
  ActiveResources active;
  for (const auto& [host, slots] : pool) {
    auto it = find_host(configs, host);
    std::vector<int> ids;
    if (it != configs.end()) {
      ids = it->second;
    } else {
      for (int i = 0; i < slots; ++i) ids.push_back(i);
    }
    active.emplace_back(host, ids);
  }
  return parse_resource_filter(active, include, exclude, legacy);
}

std::string encode_world_info(const ActiveResources& world) {
  std::string json = "{";
  for (size_t i = 0; i < world.size(); ++i) {
    json += fmt::format("{}\"{}\": [", i ? ", " : "", world[i].first);
    for (size_t j = 0; j < world[i].second.size(); ++j) {
      json += fmt::format("{}{}", j ? ", " : "", world[i].second[j]);
    }
    json += "]";
  }
  json += "}";
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  for (size_t i = 0; i < json.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(json[i]) << 16;
    if (i + 1 < json.size()) n |= static_cast<uint8_t>(json[i + 1]) << 8;
    if (i + 2 < json.size()) n |= static_cast<uint8_t>(json[i + 2]);
    out += abc[(n >> 18) & 63];
    out += abc[(n >> 12) & 63];
    out += i + 1 < json.size() ? abc[(n >> 6) & 63] : '=';
    out += i + 2 < json.size() ? abc[n & 63] : '=';
  }
  return out;
}

RunnerWorld resolve_world(RunnerArgs a, std::vector<std::string>& printed) {
  RunnerWorld w;
  if (a.has_hostfile) w.pool = parse_hostfile(a.hostfile);
  // Respect CUDA_VISIBLE_DEVICES for a single node and no explicit resource filters.
  if (w.pool.empty() && !a.visible_devices.empty() && !older_than(a.version, 0, 5, 7)) {
    const std::string detected = (older_than(a.version, 0, 14, 5) ? "Detected CUDA_VISIBLE_DEVICES="
                                                                  : "Detected VISIBLE_DEVICES=") +
                                 a.visible_devices;
    if (!a.include.empty() || !a.exclude.empty() || a.num_nodes > 1 || a.num_gpus > 0) {
      printed.push_back(detected +
                        " but ignoring it because one or several of "
                        "--include/--exclude/--num_gpus/--num_nodes cl args were used. If you "
                        "want to use CUDA_VISIBLE_DEVICES don't pass any of these arguments to "
                        "deepspeed.");
    } else {
      a.include = "localhost:" + a.visible_devices;
      printed.push_back(detected + ": setting --include=" + a.include);
    }
  }
  if ((a.num_nodes >= 0 || a.num_gpus >= 0) && (!a.include.empty() || !a.exclude.empty())) {
    value_error("Cannot specify num_nodes/gpus with include/exclude");
  }
  w.multi_node = true;
  if (w.pool.empty()) {
    if (!a.visible_devices.empty()) {
      a.device_count = a.visible_count ? a.visible_count(a.visible_devices)
                                       : static_cast<int>(split(a.visible_devices, ',').size());
    }
    if (a.device_count == 0) {
      throw RunnerError("RuntimeError", "Unable to proceed, no GPU resources available");
    }
    w.pool = {{"localhost", a.device_count}};
    w.multi_node = false;
  }
  if (!w.multi_node && a.num_nodes > 1) {
    value_error("Num nodes is >1 but no extra nodes available via hostfile");
  }
  w.active = parse_inclusion_exclusion(w.pool, a.include, a.exclude, legacy_filter(a.version));
  if (a.num_nodes > 0 && static_cast<size_t>(a.num_nodes) < w.active.size()) {
    w.active.resize(static_cast<size_t>(a.num_nodes));
  }
  if (a.num_gpus > 0) {  // every host gets slots 0..num_gpus-1, whatever its slots= says
    for (auto& [host, slots] : w.active) {
      slots.clear();
      for (int i = 0; i < a.num_gpus; ++i) slots.push_back(i);
    }
  }
  w.multi_node = w.active.size() > 1;
  return w;
}

std::vector<SlotProcess> launch_layout(const RunnerWorld& w) {
  if (w.active.empty()) throw RunnerError("IndexError", "list index out of range");
  int world_size = 0;
  for (const auto& [host, slots] : w.active) world_size += static_cast<int>(slots.size());
  std::vector<SlotProcess> out;
  int rank = 0;
  for (size_t node = 0; node < w.active.size(); ++node) {
    const auto& [host, slots] = w.active[node];
    std::string visible;
    for (int s : slots) visible += (visible.empty() ? "" : ",") + std::to_string(s);
    const auto pool = find_host(w.pool, host);
    for (size_t i = 0; i < slots.size(); ++i, ++rank) {
      SlotProcess p;
      p.host = host;
      p.node_rank = static_cast<int>(node);
      p.nnodes = static_cast<int>(w.active.size());
      p.rank = rank;
      p.local_size = static_cast<int>(slots.size());
      p.local_rank = rank % p.local_size;  // launch.py: dist_rank % num_local_procs
      p.world_size = world_size;
      p.visible_devices = visible;
      p.node_devices = pool == w.pool.end() ? 0 : pool->second;
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace fl::harness::ds
