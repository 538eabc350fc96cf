// The fault kinds. A new kind: its file in this folder (a FaultKind and its Fault), its name in
// FAULTLINE_FAULT_KINDS below, and the file in harness/CMakeLists.txt's FAULT_KIND_SOURCES.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/faults/fault.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"

// The order is the order of docs/scenarios.md and of the kind search in a `faults:` item.
#define FAULTLINE_FAULT_KINDS(X) \
  X(signal)                      \
  X(env)                         \
  X(port_squat)                  \
  X(file)                        \
  X(restart)                     \
  X(disk_full)                   \
  X(memory_limit)                \
  X(cpu_quota)                   \
  X(network)                     \
  X(args)                        \
  X(hide)                        \
  X(launcher)                    \
  X(shm)

namespace fl::harness::faults {

#define FAULTLINE_DECLARE_KIND(name) const FaultKind& name##_kind();
FAULTLINE_FAULT_KINDS(FAULTLINE_DECLARE_KIND)
#undef FAULTLINE_DECLARE_KIND

const std::vector<const FaultKind*>& fault_kinds() {
#define FAULTLINE_LIST_KIND(name) &name##_kind(),
  static const std::vector<const FaultKind*> all = {FAULTLINE_FAULT_KINDS(FAULTLINE_LIST_KIND)};
#undef FAULTLINE_LIST_KIND
  return all;
}

const FaultKind* fault_kind(const std::string& key) {
  for (const auto* k : fault_kinds()) {
    if (k->key() == key) return k;
  }
  return nullptr;
}

const char* when_name(When w) {
  switch (w) {
    case When::kLaunch:
      return "launch";
    case When::kStep:
      return "step";
    case When::kExit:
      return "exit";
  }
  return "?";
}

void Host::record(const std::string& kind, nlohmann::json data, int rank, std::string line) {
  nlohmann::json d = {{"fault", kind}};
  d.update(data);
  hist.harness("fault_injected", d, rank);
  injected.push_back(std::move(line));
}

std::unique_ptr<Fault> parse_fault(const ParseContext& c, const YAML::Node& item) {
  // The item names one kind (validated with the schema); `restart:` beside another kind is
  // that kind's modifier, alone its own kind.
  const FaultKind* found = nullptr;
  for (const auto* k : fault_kinds()) {
    if (item[k->key()] && k->key() != "restart") {
      found = k;
      break;
    }
  }
  if (!found && item["restart"]) found = fault_kind("restart");
  if (!found) loader::fail_at(c.file, item, c.at, "names no fault");
  const FaultKind& kind = *found;
  auto f = kind.parse(c, item);
  if (!f) return nullptr;
  f->kind = kind.key();
  f->rank = item["rank"] ? item["rank"].as<int>() : -1;
  f->step = item["step"] ? item["step"].as<int64_t>() : 0;
  f->restart = item["restart"] && item["restart"].as<bool>();
  if (f->rank >= c.s.topo.ranks) {
    loader::fail_at(
        c.file, item["rank"], c.at + ".rank",
        fmt::format("rank {} does not exist (allowed -1, 0-{})", f->rank, c.s.topo.ranks - 1));
  }
  const auto allowed = kind.allowed_at();
  if (item["at"]) {
    const std::string at = item["at"].as<std::string>();
    std::vector<std::string> ok;
    for (When w : allowed) {
      ok.push_back(when_name(w));
      if (at == when_name(w)) f->at = w;
    }
    if (ok.empty()) f->at = When::kLaunch;
    if (std::find(ok.begin(), ok.end(), at) == ok.end() && !(ok.empty() && at == "launch")) {
      loader::fail_at(c.file, item["at"], c.at + ".at",
                      ok.empty() ? fmt::format("{} faults are in place from launch (allowed: "
                                               "launch, or leave `at` out)",
                                               kind.key())
                                 : fmt::format("{} faults cannot happen at '{}' (allowed: {})",
                                               kind.key(), at, fmt::join(ok, ", ")));
    }
  } else if (allowed.empty()) {
    f->at = When::kLaunch;
  } else {
    f->at = std::find(allowed.begin(), allowed.end(), When::kStep) != allowed.end()
                ? When::kStep
                : allowed.front();
  }
  if (f->restart && !f->timed()) {
    loader::fail_at(c.file, item["restart"], c.at + ".restart",
                    fmt::format("{} faults are in place from launch; `restart` goes with a timed "
                                "fault (signal, file, network, restart)",
                                kind.key()));
  }
  return f;
}

}  // namespace fl::harness::faults
