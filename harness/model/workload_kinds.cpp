#include "harness/model/workload_kinds.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/model/build_paths.hpp"
#include "harness/model/tokenizer_files.hpp"

namespace fl::harness {

namespace {

void add(std::vector<std::string>& out, const char* flag, const auto& value) {
  out.push_back(flag);
  out.push_back(fmt::format("{}", value));
}

std::string worker_layout(const Scenario& s) {
  return fmt::format("{} ranks = dp {} x tp {} x pp {}, zero {}, {}, {} launcher, {} {}",
                     s.topo.ranks, s.topo.dp, s.topo.tp, s.topo.pp, s.topo.zero, s.topo.backend,
                     s.topo.launcher, s.workload.kind, s.workload.model);
}

void train_args(const Scenario& s, const std::string& run_dir, const std::string& resume_from,
                std::vector<std::string>& out) {
  add(out, "--dp", s.topo.dp);
  add(out, "--tp", s.topo.tp);
  add(out, "--pp", s.topo.pp);
  add(out, "--zero", s.topo.zero);
  if (s.workload.checkpoint_every > 0) add(out, "--save-dir", run_dir + "/checkpoints");
  if (uses_tokenizer(s)) add(out, "--tokenizer-dir", run_dir + "/tokenizer");
  if (s.workload.auto_resume) {
    add(out, "--auto-resume", run_dir + "/checkpoints");
  } else if (!resume_from.empty()) {
    add(out, "--resume", resume_from);
  }
  out.push_back("--checksum");
}

void infer_args(const Scenario& s, const std::string&, const std::string& resume_from,
                std::vector<std::string>& out) {
  add(out, "--dp", s.topo.dp);
  add(out, "--tp", s.topo.tp);
  add(out, "--pp", s.topo.pp);
  if (!resume_from.empty()) add(out, "--checkpoint", resume_from);
  add(out, "--seed", s.seed);
}

void no_args(const Scenario&, const std::string&, const std::string&, std::vector<std::string>&) {}

std::string command_layout(const Scenario& s) {
  return fmt::format("{} ranks over {} node(s), command (launch {}): {}", s.topo.ranks,
                     s.topo.nodes, s.workload.launch,
                     s.workload.command.empty() ? "" : s.workload.command[0]);
}

// The worker's steps; an inference run counts the positions it generates.
int64_t train_steps(const Scenario& s) {
  return s.workload.steps;
}
int64_t infer_positions(const Scenario& s) {
  // Every generate() call generates new_tokens positions (fewer when its requests end at eos).
  const auto calls = s.workload.options.find("workload.infer.calls");
  const bool set = calls != s.workload.options.end() && calls->second.IsScalar();
  return s.workload.new_tokens * (set ? calls->second.as<int64_t>() : 1);
}
int64_t own_steps(const Scenario&) {
  return 0;
}  // a command's: what its ranks report

const WorkloadKind kTrain{.name = "train",
                          .summary = "fl-train",
                          .binary = "fl-train",
                          .build_path = this_build::train_bin(),
                          .restartable = true,
                          .launch_args = train_args,
                          .layout_line = worker_layout,
                          .planned_steps = train_steps,
                          .step_unit = "",
                          .checks_layout = true};

const WorkloadKind kInfer{.name = "infer",
                          .summary = "fl-infer",
                          .binary = "fl-infer",
                          .build_path = this_build::infer_bin(),
                          .restartable = false,
                          .launch_args = infer_args,
                          .layout_line = worker_layout,
                          .planned_steps = infer_positions,
                          .step_unit = " positions",
                          .checks_layout = true};

const WorkloadKind kCommand{.name = "command",
                            .summary = "any program: workload.command",
                            .binary = "",
                            .build_path = "",
                            .restartable = false,
                            .launch_args = no_args,
                            .layout_line = command_layout,
                            .planned_steps = own_steps,
                            .step_unit = ""};

}  // namespace

const std::vector<const WorkloadKind*>& workload_kinds() {
  static const std::vector<const WorkloadKind*> all = {&kTrain, &kInfer, &kCommand};
  return all;
}

std::vector<std::string> workload_kind_names() {
  std::vector<std::string> out;
  for (const auto* k : workload_kinds()) out.push_back(k->name);
  return out;
}

const WorkloadKind& workload_kind(const std::string& name) {
  for (const auto* k : workload_kinds()) {
    if (k->name == name) return *k;
  }
  raise<ScenarioError>("workload.kind: unknown kind '{}' (allowed: {})", name,
                       fmt::join(workload_kind_names(), ", "));
}

}  // namespace fl::harness
