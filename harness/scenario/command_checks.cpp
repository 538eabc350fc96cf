// workload.kind: command (issue 21): what the loader checks of the command a scenario runs, and
// its placeholders (harness/model/command_args.cpp lists and replaces them).
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness {

namespace loader {

void check_command_workload(const std::string& file, const YAML::Node& doc, Scenario& s) {
  const YAML::Node w = doc["workload"];
  const YAML::Node at = w && w["command"] ? w["command"] : w ? w : doc;
  if (s.workload.kind != "command") {
    if (s.topo.launcher == "command") {
      ErrorCollector::check([&] {
        const YAML::Node t = doc["topology"];
        fail_at(file, t && t["launcher"] ? t["launcher"] : doc, "topology.launcher",
                fmt::format("launcher command runs workload.kind: command (this workload is {}; "
                            "allowed: auto, local, mpirun, srun)",
                            s.workload.kind));
      });
    }
    if (!s.workload.command.empty()) {
      ErrorCollector::check([&] {
        fail_at(file, at, "workload.command",
                fmt::format("a command is for workload.kind: command (this workload is {})",
                            s.workload.kind));
      });
    }
    return;
  }
  ErrorCollector::check([&] {
    if (s.workload.command.empty() || s.workload.command[0].empty()) {
      fail_at(file, at, "workload.command",
              "workload.kind: command needs the program and its arguments, e.g. "
              "[\"/usr/bin/python3\", \"train.py\", \"--steps\", \"10\"]");
    }
  });
  std::map<std::string, std::string> dummy;
  for (const auto& n : command_placeholders()) dummy[n] = "x";
  for (size_t i = 0; i < s.workload.command.size(); ++i) {
    ErrorCollector::check([&] {
      std::string why;
      expand_command_arg(s.workload.command[i], dummy, &why);
      if (!why.empty()) {
        fail_at(file, at.IsSequence() && i < at.size() ? at[i] : at,
                fmt::format("workload.command[{}]", i), why);
      }
    });
  }
  ErrorCollector::check([&] {
    if (s.topo.launcher != "local" && s.topo.launcher != "command") {
      const YAML::Node t = doc["topology"];
      fail_at(file, t && t["launcher"] ? t["launcher"] : at, "topology.launcher",
              fmt::format("workload.kind: command starts its ranks itself (got launcher {}; "
                          "allowed: local or command); a launcher of the job's own (torchrun, "
                          "mpirun) goes in workload.command with workload.launch: once",
                          s.topo.launcher));
    }
  });
  if (s.workload.launch == "once") {
    // One process starts every rank: faults on one rank's process have none to act on.
    for (const auto& f : s.faults.oop) {
      if (f->kind != "memory_limit" && f->kind != "cpu_quota" && f->kind != "restart") continue;
      ErrorCollector::check([&] {
        fail_at(file, doc["faults"] ? doc["faults"] : at, "faults[]." + f->kind,
                fmt::format("{} acts on one rank's process, and workload.launch: once starts "
                            "the ranks from one launcher process (allowed: launch: per_rank)",
                            f->kind));
      });
    }
  }
  ErrorCollector::check([&] {
    if (!s.faults.plans.empty()) {
      fail_at(file, doc["faults"] ? doc["faults"] : at, "faults[].plan",
              "in-process fault plans need faultline's own workers (kind train or infer); a "
              "command's job takes out-of-process faults, and the probe's collective faults "
              "through env (FAULTLINE_PROBE_FAULTS, docs/workloads.md)");
    }
  });
  s.topo.launcher =
      "command";  // the command launcher (harness/launch/launch_command.cpp) starts them
}

}  // namespace loader
}  // namespace fl::harness
