// The scenario schema: every key once, with its type, default, allowed values and meaning. The
// loader validates against it; `faultline keys` prints it (docs/scenarios.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "harness/faults/fault.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/scenario.hpp"
#include "harness/model/worker_options.hpp"
#include "harness/model/workload_kinds.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/scenario/loader.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // the schema table leaves ranges out

namespace fl::harness {

using K = KeyType;

namespace {
// "local: fork/exec one process per rank; mpirun: ..." from the launcher registry.
std::string launcher_help() {
  std::string h;
  for (const auto* l : launchers()) h += (h.empty() ? "" : "; ") + l->name + ": " + l->summary;
  return h;
}
// "train (fl-train), infer (fl-infer) or command (...)" from the workload kind registry.
std::string workload_kind_help() {
  std::string h;
  const auto& kinds = workload_kinds();
  for (size_t i = 0; i < kinds.size(); ++i) {
    const char* sep = i == 0 ? "" : i + 1 == kinds.size() ? " or " : ", ";
    h += sep + kinds[i]->name + " (" + kinds[i]->summary + ")";
  }
  return h;
}

// The workers' keys (worker_options.hpp) after workload.fidelity; then each of the harness's own
// workload keys whose section a worker declares (workload.checkpoint.resume) moves to the end of
// that section.
void add_worker_keys(std::vector<KeySpec>& v) {
  auto after = [&](const std::string& path) {
    return std::find_if(v.begin(), v.end(), [&](const KeySpec& k) { return k.path == path; }) + 1;
  };
  const auto keys = worker_option_keys();
  v.insert(after("workload.fidelity"), keys.begin(), keys.end());
  auto section_of = [&](const KeySpec& k) {
    const std::string parent = k.path.substr(0, k.path.rfind('.'));
    const bool declared =
        std::any_of(keys.begin(), keys.end(), [&](const KeySpec& w) { return w.path == parent; });
    return declared ? parent : std::string();
  };
  std::vector<KeySpec> moved;
  for (auto it = after("workload.fidelity") + static_cast<std::ptrdiff_t>(keys.size());
       it != v.end();) {
    if (section_of(*it).empty()) {
      ++it;
    } else {
      moved.push_back(*it);
      it = v.erase(it);
    }
  }
  for (auto& k : moved) {
    const std::string parent = section_of(k);
    size_t last = 0;
    for (size_t j = 0; j < v.size(); ++j) {
      if (v[j].path == parent || v[j].path.rfind(parent + ".", 0) == 0) last = j;
    }
    v.insert(v.begin() + static_cast<std::ptrdiff_t>(last) + 1, std::move(k));
  }
}

// Each fault kind's keys after the plan's (harness/faults/registry.cpp's order), each oracle's
// after expect.ranks (harness/oracles/registry.cpp's order): the plug-ins declare their own.
void add_plugin_keys(std::vector<KeySpec>& v) {
  auto at =
      std::find_if(v.begin(), v.end(), [](const KeySpec& k) { return k.path == "faults[].plan"; }) +
      1;
  for (const auto* kind : faults::fault_kinds()) {
    const auto keys = kind->keys();
    at = v.insert(at, keys.begin(), keys.end()) + static_cast<std::ptrdiff_t>(keys.size());
  }
  auto expect_at =
      std::find_if(v.begin(), v.end(), [](const KeySpec& k) { return k.path == "expect.ranks"; }) +
      1;
  const auto oracle_keys = oracles::keys();
  v.insert(expect_at, oracle_keys.begin(), oracle_keys.end());
}

}  // namespace

// The scenario's own keys, one row each in the order `faultline keys` lists them; the workers'
// and the plug-ins' keys join them where their sections are.
const std::vector<KeySpec>& scenario_schema() {
  static const std::vector<KeySpec> s = [] {
    std::vector<KeySpec> v = {
        {"name",
         K::kString,
         "",
         "Scenario name: letters, digits, '-', '_' and '.'",
         {},
         0,
         0,
         true},
        {"description", K::kString, "\"\"", "What the scenario reproduces, in a sentence or two"},
        {"extends", K::kString, "",
         "Base scenario file (relative to this one); this file's keys "
         "override it, lists replace lists"},
        {"seed",
         K::kInt,
         "7",
         "Seed of the data, the initialisation and every fault choice",
         {},
         0,
         4294967295.0},
        {"reference", K::kSection, "", "Where the scenario comes from"},
        {"reference.kind",
         K::kEnum,
         "",
         "issue or pr: the cited thread has the cause and the fix the scenario builds (the "
         "default when reference.issue or reference.pr is given); stands-for: the scenario "
         "builds a mechanism (reference.mechanism) and cites no thread",
         {"issue", "pr", "stands-for"}},
        {"reference.issue", K::kString, "\"\"",
         "Reported issue whose cause and fix the scenario builds, OWNER/NAME#NUMBER, e.g. "
         "deepspeedai/DeepSpeed#2223"},
        {"reference.pr", K::kString, "\"\"",
         "Pull request whose cause and fix the scenario builds, OWNER/NAME#NUMBER"},
        {"reference.url", K::kString, "\"\"",
         "Link to the cited thread: https://github.com/OWNER/NAME/issues/N (pull/N for a pr)"},
        {"reference.mechanism", K::kString, "\"\"",
         "kind stands-for: the mechanism the scenario builds, in a sentence (no thread cited)"},
        {"reference.symptom", K::kString, "\"\"", "Taxonomy symptom id, e.g. \"4.11\""},
        {"reference.root_cause", K::kString, "\"\"", "Taxonomy root-cause id, e.g. R4.6"},
        {"reference.fix_pattern", K::kString, "\"\"", "Fix pattern id F1-F6"},
        {"reference.needs", K::kList, "[]",
         "Keys whose values the mechanism needs, e.g. [topology.ranks, topology.zero]: a copy "
         "adapted to another setup (faultline triage's draft) keeps these values"},
        {"topology", K::kSection, "", "Ranks, launcher, backend and parallel layout"},
        {"topology.ranks", K::kInt, "1", "Number of worker processes", {}, 1, 256},
        {"topology.nodes",
         K::kInt,
         "1",
         "Simulated nodes (ranks are spread evenly; LOCAL_RANK "
         "counts within a node)",
         {},
         1,
         64},
        {"topology.backend", K::kEnum, "mpi", "Data plane", {"mpi", "nccl"}},
        {"topology.launcher", K::kEnum, "auto",
         "auto: mpirun for a CPU MPI world of more than " +
             std::to_string(loader::kAutoMpirunAbove) +
             " ranks that needs no rank process of its own (docs/harness.md#launchers), else "
             "local; " +
             launcher_help(),
         [] {
           std::vector<std::string> names = {"auto"};
           for (auto& n : launcher_names()) names.push_back(n);
           return names;
         }()},
        {"topology.network",
         K::kEnum,
         "host",
         "host: every rank on the host's loopback; namespaces: each node in its own network "
         "namespace behind a bridge (set by any network fault and by topology.nics)",
         {"host", "namespaces"}},
        {"topology.nics", K::kList, "[]",
         "Each node's network interfaces besides eth0 (10.200.0.0/24), in order: eth1 on "
         "10.200.1.0/24 behind a second bridge, eth2, eth3; each item its egress rate (tc "
         "syntax, e.g. 8mbit: a slower port beside the data-plane one) or unlimited. The ranks "
         "use eth0 unless their environment says otherwise (a network fault's route can send a "
         "node's traffic out through another). Puts the nodes in network namespaces"},
        {"topology.omp_num_threads",
         K::kEnum,
         "auto",
         "auto: where the harness starts each rank itself (the local launcher, a command "
         "launched per_rank) it sets OMP_NUM_THREADS=1 when a node runs several ranks (torchrun's "
         "default since pytorch PR 22501; the harness's or the scenario's env wins); mpirun, "
         "srun, the DeepSpeed runner and a command launched once set nothing, as those tools "
         "do; unset: "
         "nothing sets it, so each rank's BLAS starts a thread per core (torch.distributed.launch "
         "before that PR)",
         {"auto", "unset"}},
        {"topology.hosts", K::kList, "[]",
         "Hosts mpirun spreads the ranks over, evenly and in order (NAME or NAME=ADDRESS; "
         "needs launcher mpirun, or srun, which maps them onto the allocation's nodes; "
         "topology.nodes follows; docs/cluster.md)"},
        {"topology.hostfile", K::kString, "\"\"",
         "An Open MPI hostfile instead of topology.hosts (NAME or NAME=ADDRESS, slots=N, "
         "max_slots=N per line; relative to the scenario file; docs/cluster.md)"},
        {"topology.rsh_agent", K::kString, "\"\"",
         "How mpirun and the harness reach the hosts (Open MPI's plm_rsh_agent; empty: ssh; "
         "harness/hosts/netns-rsh for namespace hosts)"},
        {"topology.deepspeed", K::kSection, "",
         "launcher deepspeed: DeepSpeed runner's arguments (docs/cluster.md)"},
        {"topology.deepspeed.hostfile", K::kString, "\"\"",
         "launcher deepspeed: DeepSpeed's hostfile (`host slots=N` lines), a path relative to "
         "the scenario file or the file's text inline (a value with a newline); empty: the "
         "runner's local resources (docs/cluster.md)"},
        {"topology.deepspeed.include", K::kString, "\"\"",
         "launcher deepspeed: the runner's --include, NAME[:SLOT[,SLOT...]][@...]"},
        {"topology.deepspeed.exclude", K::kString, "\"\"",
         "launcher deepspeed: the runner's --exclude, NAME[:SLOT[,SLOT...]][@...]"},
        {"topology.deepspeed.num_nodes",
         K::kInt,
         "-1",
         "launcher deepspeed: the runner's --num_nodes (-1: not given)",
         {},
         -1,
         64},
        {"topology.deepspeed.num_gpus",
         K::kInt,
         "-1",
         "launcher deepspeed: the runner's --num_gpus (-1: not given)",
         {},
         -1,
         256},
        {"topology.deepspeed.device_count",
         K::kInt,
         "0",
         "launcher deepspeed: the devices each node has, which the runner counts without a "
         "hostfile under its own CUDA_VISIBLE_DEVICES (0: topology.ranks, and each hostfile "
         "host's slots)",
         {},
         0,
         256},
        {"topology.deepspeed.version", K::kString, "latest",
         "launcher deepspeed: DeepSpeed's version, latest or X.Y.Z; before 0.15.2 an --include "
         "slot must be below the host's slots and the specs apply as written (PR #6530)"},
        {"topology.dp", K::kInt, "0", "Data-parallel size (0: ranks / (tp x pp))", {}, 0, 256},
        {"topology.tp", K::kInt, "1", "Tensor-parallel size", {}, 1, 64},
        {"topology.pp", K::kInt, "1", "Pipeline-parallel size", {}, 1, 64},
        {"topology.zero", K::kInt, "0", "ZeRO stage", {}, 0, 3},
        {"workload", K::kSection, "", "What every rank runs"},
        {"workload.kind", K::kEnum, "train", workload_kind_help(), workload_kind_names()},
        {"workload.fidelity",
         K::kEnum,
         "faultline",
         "Error lines a failing rank prints: faultline (its own sentences, which oracles match) or "
         "pytorch (the lines real PyTorch/NCCL/DeepSpeed jobs print for the same event)",
         {"faultline", "pytorch"}},
        {"workload.checkpoint.resume", K::kBool, "false",
         "Resume from the run's latest checkpoint"},
        {"workload.checkpoint.auto_resume", K::kBool, "false",
         "Every launch (and restart) resumes from the run's `latest` checkpoint when there is one, "
         "else starts fresh (the common auto-resume pattern)"},
        {"workload.args", K::kList, "[]", "Extra worker arguments, appended as given (strings)"},
        {"workload.command", K::kList, "[]",
         "kind: command: the program and its arguments (strings; {rank}, {ranks}, {local_rank}, "
         "{local_ranks}, {node_rank}, {nodes}, {master_addr}, {master_port}, {run_id}, "
         "{run_dir}, {rank_dir}, {source_dir} are replaced; no shell)"},
        {"workload.launch",
         K::kEnum,
         "per_rank",
         "kind: command: per_rank (the harness starts the command once per rank) or once (one "
         "launcher command, e.g. torchrun --nproc-per-node, starts every rank)",
         {"per_rank", "once"}},
        {"workload.probe", K::kBool, "true",
         "kind: command: the job reports through the probe (FAULTLINE_PROBE_FILE); a rank that "
         "sends nothing within report_timeout_s, or exits before its first event, is a harness "
         "error"},
        {"workload.report_timeout_s",
         K::kFloat,
         "120",
         "kind: command with probe: seconds a rank may take to send its first event",
         {},
         1,
         3600},
        {"faults", K::kList, "[]", "What to break: in-process plans and out-of-process faults"},
        {"faults[].plan", K::kString, "", "In-process fault plan (docs/injector.md grammar)"},
        {"faults[].at",
         K::kEnum,
         "step",
         "When a file or network fault happens: launch (before the ranks start), step (once "
         "`rank`, or rank 0, reports `step`) or exit (after every rank has ended)",
         {"launch", "step", "exit"}},
        {"faults[].rank", K::kInt, "-1", "Target rank (-1: every rank)", {}, -1, 255},
        {"faults[].step",
         K::kInt,
         "0",
         "signal, file, network: the step that triggers it",
         {},
         0,
         1e9},
        {"expect", K::kSection, "", "What should happen: the oracle that judges the run"},
        {"expect.symptom", K::kString, "\"\"", "Symptom id the scenario reproduces (\"\": none)"},
        {"expect.oracle", K::kEnum, "completed", "Oracle deciding pass/fail", oracle_names()},
        {"expect.absent", K::kBool, "false",
         "Invert the oracle: pass when it does not observe its symptom and every rank finishes "
         "cleanly (a fix variant's expectation)"},
        {"expect.within_s",
         K::kFloat,
         "0",
         "The symptom must show within this many seconds of the job's first step (of the first "
         "launch when no step was made; 0: any time)",
         {},
         0,
         1e6},
        {"expect.ranks", K::kIntList, "[]", "Ranks the symptom must involve (empty: any)"},
        {"expect.of", K::kList, "[]",
         "any / all: the expectations combined, each a map of expect keys (oracle and its "
         "parameters; absent inverts one); any passes when one passes, all when every one does"},
        {"prepare", K::kSection, "",
         "Overrides (any keys above) of a preparation run without faults that runs to completion "
         "first, in this run's directory; its checkpoints become this run's (e.g. a training run "
         "whose checkpoint the faulty run loads)"},
        {"after_prepare", K::kList, "[]",
         "A command run after the preparation run and before this one, in the run directory, "
         "as an argument list (no shell): a project tool (fl-ckpt) and paths inside the run "
         "directory, e.g. [fl-ckpt, reshard, --in, prepare/checkpoints, --out, checkpoints, --dp, "
         "'2']; when it leaves no checkpoints/ the preparation's are copied as without it"},
        {"baseline", K::kSection, "",
         "Overrides (any keys above) of the reference run the baseline oracle compares with: this "
         "scenario without its faults, run to completion beside it in RUN_DIR/baseline (e.g. "
         "another topology)"},
        {"fix", K::kSection, "",
         "Overrides (any keys above) that must clear the symptom; "
         "`faultline run --fix` applies them"},
        {"timeouts", K::kSection, "", "Deadlines"},
        {"timeouts.run_s",
         K::kFloat,
         "120",
         "Whole run; the harness ends it after this",
         {},
         1,
         86400},
        {"timeouts.comm_ms", K::kInt, "30000", "Every collective's deadline", {}, 100, 1e8},
        {"timeouts.rendezvous_ms",
         K::kInt,
         "20000",
         "How long a rank waits for the world",
         {},
         100,
         1e8},
        {"env", K::kStringMap, "{}", "Environment for every rank"},
        {"detectors", K::kList, "[]",
         "Tools the harness starts beside the run (docs/detectors.md): a baseline detector's name "
         "(hang, comm, numeric, straggler, memory, logs), `baseline` for all six, or a command "
         "line"},
        {"recovery", K::kString, "\"\"",
         "Recovery tool started beside the run: a policy of fl-recover (restart, shrink, "
         "microbatch, skip-batch, reset-scale) or a command line; \"\": none"},
        {"rank_env", K::kSection, "", "Per-rank environment: {\"2\": {VAR: value}}"},
    };
    add_worker_keys(v);
    add_plugin_keys(v);
    return v;
  }();
  return s;
}

std::string key_type_name(const KeySpec& k) {
  switch (k.type) {
    case K::kSection:
      return "map";
    case K::kString:
      return "string";
    case K::kInt:
      return "integer";
    case K::kFloat:
      return "number";
    case K::kBool:
      return "true/false";
    case K::kEnum:
      return "one of " + fmt::format("{}", fmt::join(k.choices, ", "));
    case K::kStringMap:
      return "map of strings";
    case K::kIntList:
      return "list of integers";
    case K::kList:
      return "list";
  }
  return "?";
}

std::string schema_markdown() {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : scenario_schema()) {
    std::string range;
    if ((k.type == K::kInt || k.type == K::kFloat) && k.min < k.max) {
      range = fmt::format(" ({}-{})", k.min, k.max);
    }
    out += fmt::format("| `{}` | {}{} | {} | {}{} |\n", k.path, key_type_name(k), range,
                       k.default_value.empty() ? "" : "`" + k.default_value + "`", k.doc,
                       k.required ? " (required)" : "");
  }
  return out;
}

}  // namespace fl::harness
