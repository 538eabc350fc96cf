#include "harness/scenario/hostfile.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "harness/model/scenario.hpp"

namespace fl::harness {

namespace {

constexpr size_t kMaxBytes = 1 << 20;  // a hostfile of a large cluster is a few hundred KiB
constexpr const char* kForm =
    "allowed: one host per line, NAME or NAME=ADDRESS, then optionally slots=N and max_slots=N; "
    "'#' starts a comment";

[[noreturn]] void fail(const std::string& path, int line, const std::string& what) {
  raise<ScenarioError>("{}:{}: {} ({})", path, line, what, kForm);
}

int count_value(const std::string& path, int line, const std::string& key, const std::string& v) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1) {
    fail(path, line, fmt::format("{}='{}' is not a positive whole number", key, v));
  }
  return n;
}

}  // namespace

bool host_name_ok(const std::string& n) {
  // As a resolver or `ip netns` takes it; it also travels through an rsh agent's command line,
  // so nothing a shell would read.
  static const std::regex re("[A-Za-z0-9][A-Za-z0-9._-]{0,252}");
  return std::regex_match(n, re);
}

bool host_address_ok(const std::string& a) {
  unsigned char buf[16];
  return inet_pton(AF_INET, a.c_str(), buf) == 1 || inet_pton(AF_INET6, a.c_str(), buf) == 1;
}

std::vector<HostfileEntry> parse_hostfile_text(const std::string& path, const std::string& text) {
  std::vector<HostfileEntry> out;
  std::map<std::string, int> seen;  // name -> line
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    if (const auto hash = raw.find('#'); hash != std::string::npos) raw.resize(hash);
    std::istringstream words(raw);
    std::string item;
    if (!(words >> item)) continue;  // blank or comment only
    HostfileEntry e;
    e.line = line;
    const auto eq = item.find('=');
    e.name = item.substr(0, eq);
    if (eq != std::string::npos) e.address = item.substr(eq + 1);
    if (!host_name_ok(e.name)) {
      fail(path, line,
           fmt::format("'{}' is not a host name (letters, digits, '.', '_' and '-', not starting "
                       "with a punctuation)",
                       e.name));
    }
    if (eq != std::string::npos && !host_address_ok(e.address)) {
      fail(path, line, fmt::format("'{}' is not an IPv4 or IPv6 address", e.address));
    }
    std::string kv;
    while (words >> kv) {
      const auto k_eq = kv.find('=');
      const std::string key = kv.substr(0, k_eq);
      const std::string value = k_eq == std::string::npos ? "" : kv.substr(k_eq + 1);
      int* slot = key == "slots"                             ? &e.slots
                  : key == "max_slots" || key == "max-slots" ? &e.max_slots
                                                             : nullptr;
      if (slot == nullptr || k_eq == std::string::npos) {
        fail(path, line,
             fmt::format("'{}' after host {} is not slots=N or max_slots=N", kv, e.name));
      }
      if (*slot != 0) fail(path, line, fmt::format("{} is given twice for host {}", key, e.name));
      *slot = count_value(path, line, key, value);
    }
    if (e.slots != 0 && e.max_slots != 0 && e.slots > e.max_slots) {
      fail(path, line,
           fmt::format("host {} has slots={} above max_slots={}", e.name, e.slots, e.max_slots));
    }
    if (auto [it, fresh] = seen.emplace(e.name, line); !fresh) {
      fail(path, line,
           fmt::format("host {} is listed twice (first on line {}; each host once)", e.name,
                       it->second));
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) fail(path, line, "the hostfile lists no host");
  return out;
}

std::vector<HostfileEntry> parse_hostfile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    raise<ScenarioError>("{}: cannot read the hostfile: it is a directory (allowed: a file)", path);
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    raise<ScenarioError>("{}: cannot read the hostfile: {} (allowed: a readable file)", path,
                         std::strerror(errno));
  }
  std::string text(kMaxBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > kMaxBytes) {
    raise<ScenarioError>("{}: the hostfile is larger than {} bytes (allowed: up to {})", path,
                         kMaxBytes, kMaxBytes);
  }
  if (text.find('\0') != std::string::npos) {
    raise<ScenarioError>("{}: the hostfile is not text (it holds a NUL byte)", path);
  }
  return parse_hostfile_text(path, text);
}

}  // namespace fl::harness
