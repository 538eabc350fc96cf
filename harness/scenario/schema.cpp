// The scenario schema: every key once, with its type, default, allowed values and meaning. The
// loader validates against it; `faultline keys` prints it (docs/scenarios.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "harness/faults/fault.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/model/scenario.hpp"
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
}  // namespace

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
         "namespace behind a bridge (set by any network fault)",
         {"host", "namespaces"}},
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
        {"topology.dp", K::kInt, "0", "Data-parallel size (0: ranks / (tp x pp))", {}, 0, 256},
        {"topology.tp", K::kInt, "1", "Tensor-parallel size", {}, 1, 64},
        {"topology.pp", K::kInt, "1", "Pipeline-parallel size", {}, 1, 64},
        {"topology.zero", K::kInt, "0", "ZeRO stage", {}, 0, 3},
        {"workload", K::kSection, "", "What every rank runs"},
        {"workload.kind",
         K::kEnum,
         "train",
         "train (fl-train), infer (fl-infer) or command (any program: workload.command)",
         {"train", "infer", "command"}},
        {"workload.model", K::kEnum, "tiny", "Model size", {"tiny", "small"}},
        {"workload.fidelity",
         K::kEnum,
         "faultline",
         "Error lines a failing rank prints: faultline (its own sentences, which oracles match) or "
         "pytorch (the lines real PyTorch/NCCL/DeepSpeed jobs print for the same event)",
         {"faultline", "pytorch"}},
        {"workload.device",
         K::kEnum,
         "cpu",
         "Where ranks compute: cpu, or cuda (each rank's GPU, chosen by FAULTLINE_GPU_MAP in env; "
         "a run refuses to start where no CUDA device is visible)",
         {"cpu", "cuda"}},
        {"workload.steps", K::kInt, "20", "Training steps", {}, 1, 1000000},
        {"workload.precision", K::kEnum, "fp32", "Compute precision", {"fp32", "fp16", "bf16"}},
        {"workload.micro_batch", K::kInt, "4", "Samples per micro-batch per DP rank", {}, 1, 4096},
        {"workload.grad_accum", K::kInt, "1", "Micro-batches per step", {}, 1, 1024},
        {"workload.lr", K::kFloat, "0.01", "Peak learning rate", {}, 0, 10},
        {"workload.clip", K::kFloat, "1.0", "Gradient clipping norm (0: off)", {}, 0, 1e9},
        {"workload.schedule", K::kEnum, "1f1b", "Pipeline schedule", {"1f1b", "gpipe"}},
        {"workload.eval_every", K::kInt, "0", "Evaluate every N steps (0: never)", {}, 0, 1000000},
        {"workload.loss_scale", K::kFloat, "65536", "Initial fp16 loss scale", {}, 0, 1e38},
        {"workload.min_loss_scale",
         K::kFloat,
         "1",
         "Smallest fp16 loss scale before the run fails",
         {},
         0,
         1e38},
        {"workload.loss_scale_window",
         K::kInt,
         "1000",
         "Clean steps in a row before the fp16 loss scale doubles (DeepSpeed's loss_scale_window)",
         {},
         1,
         1e9},
        {"workload.hysteresis",
         K::kInt,
         "1",
         "fp16 overflows tolerated (steps skipped) before the loss scale is halved",
         {},
         1,
         1e6},
        {"workload.raise_error_at_min_scale", K::kBool, "true",
         "An overflow at the minimum loss scale stops the run with DeepSpeed's error; false: the "
         "step is skipped and training goes on at the minimum scale"},
        {"workload.optimizer", K::kEnum, "adamw", "Optimizer", {"adamw", "sgd"}},
        {"workload.momentum",
         K::kFloat,
         "0",
         "SGD momentum (optimizer: sgd; 0: plain SGD)",
         {},
         0,
         0.9999},
        {"workload.lr_scaling",
         K::kEnum,
         "none",
         "Scale the lr schedule with the data-parallel size: none, linear (x dp) or sqrt "
         "(x sqrt(dp))",
         {"none", "linear", "sqrt"}},
        {"workload.warmup_steps", K::kInt, "5", "Learning-rate warm-up steps", {}, 0, 1000000},
        {"workload.warmup_style",
         K::kEnum,
         "linear",
         "linear (ramp up to the peak), constant (the unscaled lr during the warm-up) or none",
         {"linear", "constant", "none"}},
        {"workload.data", K::kSection, "", "Synthetic corpus and sampler"},
        {"workload.data.samples",
         K::kInt,
         "0",
         "Dataset size (0: the trainer's default)",
         {},
         0,
         1e9},
        {"workload.data.drop_last", K::kBool, "false",
         "Drop the uneven tail (real frameworks "
         "default to false)"},
        {"workload.data.seed",
         K::kInt,
         "0",
         "Data seed (0: the scenario seed)",
         {},
         0,
         4294967295.0},
        {"workload.activation_checkpointing", K::kBool, "false",
         "Recompute each block's forward during the backward instead of keeping its activations"},
        {"workload.zero", K::kSection, "", "ZeRO knobs (topology.zero picks the stage)"},
        {"workload.zero.init", K::kBool, "true",
         "Stage 3: build each rank's partition directly (deepspeed.zero.Init); false "
         "materialises the whole model on every rank first"},
        {"workload.zero.offload_optimizer", K::kBool, "false",
         "Master weights and Adam moments of the rank's partition on the host, charged to the "
         "host budget (FAULTLINE_HOST_MEMORY_BUDGET_BYTES); stage 1-3 only"},
        {"workload.zero.reduce_bucket_size",
         K::kInt,
         "0",
         "Gradient bucket in bytes (0: 1 MiB or the model if smaller)",
         {},
         0,
         1e12},
        {"workload.zero.allgather_bucket_size",
         K::kInt,
         "0",
         "Stages 1-2: bytes all-gathered per round of the updated parameters (0: 1 MiB or the "
         "model)",
         {},
         0,
         1e12},
        {"workload.zero.prefetch_bytes",
         K::kInt,
         "-1",
         "Stage 3: gather groups this many bytes ahead (-1: 1 MiB; 0: off)",
         {},
         -1,
         1e12},
        {"workload.zero.max_live_bytes",
         K::kInt,
         "-1",
         "Stage 3: keep gathered groups resident while they total at most this (-1 or 0: free "
         "each after use)",
         {},
         -1,
         1e12},
        {"workload.checkpoint", K::kSection, "", "Sharded checkpoints in the run directory"},
        {"workload.checkpoint.every",
         K::kInt,
         "0",
         "Checkpoint every N steps (0: never)",
         {},
         0,
         1e9},
        {"workload.checkpoint.resume", K::kBool, "false",
         "Resume from the run's latest checkpoint"},
        {"workload.checkpoint.auto_resume", K::kBool, "false",
         "Every launch (and restart) resumes from the run's `latest` checkpoint when there is one, "
         "else starts fresh (the common auto-resume pattern)"},
        {"workload.infer", K::kSection, "", "Inference workload (kind: infer)"},
        {"workload.infer.requests", K::kInt, "4", "Batched requests", {}, 1, 4096},
        {"workload.infer.prompt_len", K::kInt, "8", "Prompt tokens per request", {}, 1, 4096},
        {"workload.infer.new_tokens",
         K::kInt,
         "8",
         "Tokens to generate (with prompt_len, within the context: tiny 16, small 64)",
         {},
         1,
         4096},
        {"workload.infer.load",
         K::kEnum,
         "sharded",
         "How each rank loads the checkpoint: sharded (only its own shard files) or full (the "
         "whole checkpoint into host memory, charged to the host budget, then its shard kept)",
         {"sharded", "full"}},
        {"workload.shape", K::kSection, "", "Overrides of the model's shape (0: the model's own)"},
        {"workload.shape.d_model", K::kInt, "0", "Model width", {}, 0, 65536},
        {"workload.shape.layers", K::kInt, "0", "Transformer blocks", {}, 0, 1024},
        {"workload.shape.heads", K::kInt, "0", "Attention heads", {}, 0, 1024},
        {"workload.shape.seq_len",
         K::kInt,
         "0",
         "Context length (inference: prompt_len + new_tokens must fit in it)",
         {},
         0,
         65536},
        {"workload.eval_data", K::kSection, "", "Evaluation set (eval_every > 0)"},
        {"workload.eval_data.samples",
         K::kInt,
         "0",
         "Evaluation set size (0: 2 full micro-batches per data-parallel rank)",
         {},
         0,
         1e9},
        {"workload.eval_data.drop_last", K::kBool, "false",
         "Drop the evaluation set's uneven tail and partial last batch; without it ranks can get "
         "different numbers of evaluation batches, each batch's loss being all-reduced"},
        {"workload.plugins", K::kList, "[]",
         "Kernel plugins every rank loads at start (libfl_NAME.so; e.g. fused_adamw)"},
        {"workload.jit", K::kBool, "false",
         "Build the plugins from source at start with the compiler named by CXX (like a JIT op "
         "builder); one rank builds under a lock, the others reuse it"},
        {"workload.fetch", K::kList, "[]",
         "Artifacts every rank downloads at start from the run's HTTP hub into its node's cache "
         "(tokenizer.json: the data pipeline's vocabulary)"},
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
    // Each fault kind's keys, after the plan's (harness/faults/registry.cpp's order).
    auto at = std::find_if(v.begin(), v.end(),
                           [](const KeySpec& k) { return k.path == "faults[].plan"; }) +
              1;
    for (const auto* kind : faults::fault_kinds()) {
      const auto keys = kind->keys();
      at = v.insert(at, keys.begin(), keys.end()) + static_cast<std::ptrdiff_t>(keys.size());
    }
    // Each oracle's keys, after expect.ranks (harness/oracles/registry.cpp's order).
    auto expect_at = std::find_if(v.begin(), v.end(),
                                  [](const KeySpec& k) { return k.path == "expect.ranks"; }) +
                     1;
    const auto oracle_keys = oracles::keys();
    v.insert(expect_at, oracle_keys.begin(), oracle_keys.end());
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
