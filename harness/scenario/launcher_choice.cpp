// topology.launcher: auto (the default): which launcher a scenario that names none gets. A CPU MPI
// world above kAutoMpirunAbove ranks starts through mpirun (its ranks join one world at once; the
// local launcher's MPI singletons join through connect/accept, which takes seconds per rank),
// unless something in the scenario needs the local launcher's own process per rank. Everything else
// keeps the local launcher, as before there was a choice.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/launch/tools.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {

// A value mpirun's app file cannot carry (launch_mpirun.cpp refuses it when it writes the file).
bool app_file_cannot_carry(const std::string& v) {
  return v.empty() || v.find_first_of(" \t\n\"'") != std::string::npos;
}

// The scenario's env and rank_env as the launch sees them (the loader fills s.env later).
RankEnv rank_env_of(const YAML::Node& r) {
  RankEnv e;
  for (auto it = r["env"].begin(); it != r["env"].end(); ++it) {
    e.all[it->first.Scalar()] = it->second.Scalar();
  }
  for (auto it = r["rank_env"].begin(); it != r["rank_env"].end(); ++it) {
    int rank = -1;
    if (!YAML::convert<int>::decode(it->first, rank)) continue;  // refused by parse_env
    for (auto v = it->second.begin(); v != it->second.end(); ++v) {
      e.per_rank[rank][v->first.Scalar()] = v->second.Scalar();
    }
  }
  return e;
}

// Why one variable cannot reach the ranks through mpirun ("" when it can): a value every rank
// shares goes in mpirun's environment, so only a rank's own value must fit the app file.
std::string value_reason(const RankEnv& e, int ranks, const std::string& at, const std::string& k,
                         const std::string& v) {
  if (app_file_cannot_carry(v)) {
    return at + " is empty or has whitespace or quotes (mpirun's app file cannot carry it)";
  }
  if (app_file_comment(v) && !env_not_shared(e, ranks, k, v).empty()) {
    return at + " has '#' or '//' and is not every rank's (mpirun's app file reads a comment)";
  }
  return "";
}

// Why the scenario's environment cannot go through mpirun ("" when it can).
std::string env_reason(const YAML::Node& r, int ranks) {
  const RankEnv e = rank_env_of(r);
  for (const auto& [k, v] : e.all) {
    if (auto why = value_reason(e, ranks, "env." + k, k, v); !why.empty()) return why;
  }
  for (const auto& [rank, vars] : e.per_rank) {
    for (const auto& [k, v] : vars) {
      const std::string at = fmt::format("rank_env.{}.{}", rank, k);
      if (auto why = value_reason(e, ranks, at, k, v); !why.empty()) return why;
    }
  }
  return "";
}

// Why workload.args cannot go through mpirun's app file ("" when they can).
std::string args_reason(const Scenario& s) {
  for (size_t i = 0; i < s.workload.extra_args.size(); ++i) {
    const std::string& a = s.workload.extra_args[i];
    if (app_file_cannot_carry(a) || app_file_comment(a)) {
      return fmt::format(
          "workload.args[{}] is empty or has whitespace, quotes, '#' or '//' (mpirun's app file "
          "cannot carry it as one word)",
          i);
    }
  }
  return "";
}

// Why an out-of-process fault keeps the local launcher. The kinds' own parsers know what mpirun
// cannot do (network, cgroups, a launcher started per node): asked again with launcher mpirun,
// the first refusal is the reason. A fault they accept still acts on one rank's process or launch
// (a signal, its environment, a restart), and under mpirun a rank that ends takes the whole job
// with it: the fault's outcome would be mpirun's teardown, not what the other ranks do.
std::string fault_reason(const std::string& file, const YAML::Node& faults, const Scenario& s) {
  for (size_t i = 0; i < faults.size(); ++i) {
    const YAML::Node item = faults[i];
    if (!item.IsMap() || item["plan"]) continue;  // in-process plans work under either launcher
    const std::string at = fmt::format("faults[{}]", i);
    Scenario under_mpirun = s;
    under_mpirun.topo.launcher = "mpirun";
    std::string kind = "?";
    try {
      const auto f = faults::parse_fault(
          {file, at, under_mpirun, launcher_has_rank_processes, rank_process_launchers}, item);
      if (!f) continue;  // switched off
      kind = f->kind;
    } catch (const ScenarioError& e) {
      // Its own message names what it needs ("... needs topology.launcher: local").
      std::string m = e.what();
      if (const auto p = m.find(at); p != std::string::npos) m = m.substr(p);
      return m;
    }
    return fmt::format(
        "{} ({}) acts on a rank's own process or launch (under mpirun a rank's end "
        "ends the whole job)",
        at, kind);
  }
  return "";
}

}  // namespace

// Why the recovery tool keeps the local launcher: shrink reshards into a smaller world, and a
// tool of the scenario's own may restart ranks one by one (restart_rank); both need rank
// processes of the harness's own.
std::string recovery_reason(const std::string& recovery) {
  if (recovery.empty()) return "";
  const std::string first = recovery.substr(0, recovery.find(' '));
  if (first == "shrink") {
    return "recovery shrink restarts into a smaller world (a resharding restart needs the " +
           rank_process_launchers() + " launcher)";
  }
  for (const auto& p : recovery_policies()) {
    if (first == p) return "";
  }
  return "recovery '" + recovery +
         "' is a tool of the scenario's own, which may use restart_rank "
         "or a resharding restart (they need the " +
         rank_process_launchers() + " launcher)";
}

LauncherChoice choose_launcher(const std::string& file, const YAML::Node& resolved,
                               const Scenario& s) {
  const auto local = [](std::string why) { return LauncherChoice{"local", std::move(why)}; };
  if (s.workload.kind == "command") return local("workload.kind: command starts its ranks itself");
  if (s.topo.backend != "mpi") return local("backend " + s.topo.backend + " is not an MPI world");
  if (s.workload.device != "cpu")
    return local("workload.device " + s.workload.device + " is not a CPU world");
  if (s.topo.ranks <= kAutoMpirunAbove) {
    return local(fmt::format("{} ranks <= {}", s.topo.ranks, kAutoMpirunAbove));
  }
  if (!s.topo.hosts.empty()) return local("topology.hosts needs topology.launcher: mpirun named");
  const auto big = [&](const std::string& why) {
    return local(fmt::format("{} ranks > {}, but {}", s.topo.ranks, kAutoMpirunAbove, why));
  };
  if (s.topo.network != "host")
    return big("topology.network: " + s.topo.network + " needs rank processes");
  if (auto why = fault_reason(file, resolved["faults"], s); !why.empty()) return big(why);
  if (auto why = recovery_reason(resolved["recovery"].as<std::string>("")); !why.empty()) {
    return big(why);
  }
  if (auto why = env_reason(resolved, s.topo.ranks); !why.empty()) return big(why);
  if (auto why = args_reason(s); !why.empty()) return big(why);
  return {"mpirun", fmt::format("{} ranks > {}, nothing needs separate rank processes",
                                s.topo.ranks, kAutoMpirunAbove)};
}

void pin_side_run_launcher(std::string& yaml, const std::string& launcher) {
  if (yaml.empty()) return;
  YAML::Node run = YAML::Load(yaml);
  const YAML::Node named = run["topology"] ? run["topology"]["launcher"] : YAML::Node();
  if (named && named.Scalar() != "auto") return;  // its overrides name one: theirs
  run["topology"]["launcher"] = launcher;
  YAML::Emitter em;
  em << run;
  yaml = em.c_str();
}

}  // namespace fl::harness::loader

namespace fl::harness {

Scenario with_recovery_launcher(Scenario s, const std::string& recovery) {
  if (s.topo.launcher_reason.empty() || s.topo.launcher != "mpirun")
    return s;  // named, or already local
  if (auto why = loader::recovery_reason(recovery); !why.empty()) {
    s.topo.launcher = "local";
    s.topo.launcher_reason =
        fmt::format("{} ranks > {}, but --{}", s.topo.ranks, loader::kAutoMpirunAbove, why);
  }
  return s;
}

}  // namespace fl::harness
