// The launcher registry (FAULTLINE_LAUNCHERS in launcher.hpp) and the Launcher defaults.
#include "harness/launch/launcher.hpp"

#include <csignal>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

pid_t Launcher::start_rank(LaunchHost&, int rank, const std::vector<std::string>&) {
  raise<Error>("launcher {} cannot start rank {} on its own", launcher_info(kind()).name, rank);
}

std::vector<int> Launcher::kill_ranks(Supervisor& sup, const std::set<int>& ranks) {
  std::vector<int> killed;
  for (int r : ranks) {
    if (const pid_t pid = rank_pid(r); pid != 0) {
      sup.mark_by_harness(pid);
      sup.signal(pid, SIGKILL);
      killed.push_back(r);
    }
  }
  return killed;
}

const std::vector<const LauncherInfo*>& launchers() {
#define FAULTLINE_LAUNCHER_LIST(e, name) &name##_launcher(),
  static const std::vector<const LauncherInfo*> all = {
      FAULTLINE_LAUNCHERS(FAULTLINE_LAUNCHER_LIST)};
#undef FAULTLINE_LAUNCHER_LIST
  return all;
}

const LauncherInfo& launcher_info(LauncherKind kind) {
  for (const auto* l : launchers()) {
    if (l->kind == kind) return *l;
  }
  raise<Error>("launcher kind {} is not registered", static_cast<int>(kind));
}

std::vector<std::string> launcher_names() {
  std::vector<std::string> names;
  for (const auto* l : launchers()) names.push_back(l->name);
  return names;
}

LauncherKind launcher_kind(const std::string& name) {
  for (const auto* l : launchers()) {
    if (l->name == name) return l->kind;
  }
  throw ScenarioError(fmt::format("topology.launcher: '{}' is not a launcher (allowed: {})", name,
                                  fmt::join(launcher_names(), ", ")));
}

bool launcher_has_rank_processes(const std::string& name) {
  return launcher_info(launcher_kind(name)).rank_processes;
}

std::string rank_process_launchers() {
  std::vector<std::string> names;
  for (const auto* l : launchers()) {
    if (l->rank_processes) names.push_back(l->name);
  }
  return fmt::format("{}", fmt::join(names, " or "));
}

}  // namespace fl::harness
