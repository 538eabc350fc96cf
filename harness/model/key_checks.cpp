// The checks a scenario key's parser builds on (key_checks.hpp): moved below the loader so that
// the fault kinds' parsers can use them without including harness/scenario.
#include "harness/model/key_checks.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/utf8.hpp"
#include "base/version.hpp"

namespace fl::harness::loader {

namespace {

thread_local ErrorCollector* g_collector = nullptr;

}  // namespace

ErrorCollector::ErrorCollector() : owner_(g_collector == nullptr) {
  if (owner_) g_collector = this;
}

ErrorCollector::~ErrorCollector() {
  if (owner_) g_collector = nullptr;
}

bool ErrorCollector::collect(const ScenarioError& e) {
  if (g_collector == nullptr) return false;
  std::string m = e.what();
  if (g_collector->seen_.insert(m).second) g_collector->errors_.push_back(std::move(m));
  return true;
}

bool ErrorCollector::any() {
  return count() > 0;
}

size_t ErrorCollector::count() {
  return g_collector == nullptr ? 0 : g_collector->errors_.size();
}

void ErrorCollector::throw_if_any(const std::string& file) {
  if (!any()) return;
  const auto& v = g_collector->errors_;
  if (v.size() == 1) throw ScenarioError(v.front());
  throw ScenarioError(fmt::format("{}: {} errors:\n  {}", file, v.size(), fmt::join(v, "\n  ")));
}

void fail_at(const std::string& file, const YAML::Node& node, const std::string& path,
             const std::string& what) {
  const auto m = node.Mark();
  if (m.line >= 0) {
    raise<ScenarioError>("{}:{}:{}: {}: {}", file, m.line + 1, m.column + 1, path, what);
  }
  raise<ScenarioError>("{}: {}: {}", file, path, what);
}

// "64k", "300m", "2g" or plain bytes.
int64_t parse_size(const std::string& file, const YAML::Node& n, const std::string& key) {
  const std::string v = n.Scalar();
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = v.substr(used);
  const double mult = unit.empty()                 ? 1
                      : unit == "k" || unit == "K" ? 1024.0
                      : unit == "m" || unit == "M" ? 1024.0 * 1024
                      : unit == "g" || unit == "G" ? 1024.0 * 1024 * 1024
                                                   : -1;
  // Up to 2^50 bytes (1 PiB): a larger one (1e300g) would overflow what the faults compute with.
  constexpr double kMax = 1125899906842624.0;
  if (used == 0 || mult < 0 || !(x > 0) || !std::isfinite(x) || x * mult < 1 || x * mult > kMax) {
    fail_at(file, n, key,
            fmt::format("'{}' is not a size (allowed: a positive number of bytes with an optional "
                        "k, m or g suffix, from 1 byte to 1 PiB)",
                        v));
  }
  return static_cast<int64_t>(x * mult);
}

// File faults touch only the run directory: no absolute paths, no way out with "..".
void check_relative(const std::string& file, const YAML::Node& n, const std::string& key,
                    const std::string& p) {
  if (p.empty() || p[0] == '/' || p.find("..") != std::string::npos) {
    fail_at(
        file, n, key,
        fmt::format("'{}' must be a path inside the run directory (relative, without '..')", p));
  }
}

void check_tc_rate(const std::string& file, const YAML::Node& n, const std::string& key) {
  const std::string v = n.Scalar();
  size_t i = 0;
  while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.')) ++i;
  std::string unit = v.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // tc(8) units: bits or bytes per second, with SI or IEC prefixes.
  static const std::pair<const char*, double> kUnits[] = {
      {"bit", 1},        {"kbit", 1e3},        {"mbit", 1e6},          {"gbit", 1e9},
      {"tbit", 1e12},    {"kibit", 1024.0},    {"mibit", 1048576.0},   {"gibit", 1073741824.0},
      {"bps", 8},        {"kbps", 8e3},        {"mbps", 8e6},          {"gbps", 8e9},
      {"kibps", 8192.0}, {"mibps", 8388608.0}, {"gibps", 8589934592.0}};
  double mult = -1;
  for (const auto& [u, m] : kUnits) {
    if (unit == u) mult = m;
  }
  double x = -1;
  if (i > 0 && std::count(v.begin(), v.begin() + static_cast<long>(i), '.') <= 1 && v[0] != '.') {
    x = std::strtod(v.substr(0, i).c_str(), nullptr);
  }
  const double bits = x * mult;
  if (mult < 0 || !(x > 0) || !std::isfinite(bits) || bits < 8 || bits > 1e13) {
    fail_at(file, n, key,
            fmt::format("'{}' is not a tc rate (allowed: a positive number and a unit: bit, kbit, "
                        "mbit, gbit, tbit, bps, kbps, mbps, gbps or the IEC kibit, mibit, ...; "
                        "from 8bit to 10tbit)",
                        valid_utf8(v)));
  }
}

void check_version(const std::string& file, const YAML::Node& n, const std::string& key) {
  if (n.Scalar().empty() || parse_version(n.Scalar())) return;
  fail_at(file, n, key,
          fmt::format("'{}' is not a version (allowed: {})", n.Scalar(), kVersionAllowed));
}

void check_regex(const std::string& file, const YAML::Node& n, const std::string& key) {
  try {
    std::regex re(n.Scalar(), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail_at(file, n, key,
            fmt::format("'{}' is not a valid regex (ECMAScript): {}", n.Scalar(), e.what()));
  }
}

}  // namespace fl::harness::loader
