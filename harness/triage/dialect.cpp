#include "harness/triage/dialect.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "base/text_mask.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage::dialect {

namespace fs = std::filesystem;

const std::vector<LogsSignature>& logs_signatures() {
  // harness/detectors/logs_signatures.hpp, row for row (dialect_test compares every field).
  static const std::vector<LogsSignature> s = {
      {"build failed",
       R"(building kernel plugin .* failed|Error building extension '|error: .* (undeclared|was not declared)|compiler .* not found)",
       "1.1", "5.6", nullptr},
      {"import failed",
       R"(cannot load kernel plugin|cannot open shared object file|undefined symbol)", "1.2",
       "5.11", nullptr},
      {"no kernel image", R"(no kernel image is available)", "5.7", "5.7", nullptr},
      {"fetch failed", R"(cannot fetch artifact|HTTP [45][0-9][0-9])", "1.3", "1.3", nullptr},
      {"address in use",
       R"(address already in use|cannot listen on|server socket has failed to (listen|bind))",
       "2.1", "2.1", nullptr},
      {"world mismatch",
       R"(world size mismatch|duplicate rank|out of range for world|run id mismatch|config hash mismatch)",
       "2.1", "2.1", nullptr},
      {"rank missing",
       R"(missing: rank|ranks? never joined|waiting for (clients|workers)\. [0-9]+/[0-9]+ (clients|workers) joined)",
       "2.2", "2.2", nullptr},
      {"store unreachable",
       R"(cannot reach the rendezvous store|connection refused|connect timed out|client socket has (timed out|failed to connect)|NCCL WARN socket(Poll|Start)?Connect)",
       "2.2", "2.2", nullptr},
      {"layout too large", R"(model-parallel size .* is larger than)", "2.3", "5.1", nullptr},
      {"zero + pp", R"(ZeRO stage [0-9] cannot be combined)", "3.2", "3.2", nullptr},
      {"token out of vocab", R"(token id [0-9]+ .*outside)", "3.3", "5.8", nullptr},
      {"replicas differ", R"(parameters differ across data-parallel replicas)", "3.5", "3.5",
       nullptr},
      {"format version", R"(format version [0-9]+, this build reads)", "4.12", "4.12", nullptr},
      {"other layout", R"(was saved with layout|partitioned tp [0-9]+ x pp [0-9]+)", "4.10", "5.5",
       nullptr},
      {"size mismatch", R"(size mismatch for)", "4.6", "5.8", nullptr},
      {"lost latest", R"(no 'latest' file .* although it holds)", "4.5", "4.5", nullptr},
      {"missing shard",
       R"(missing shard|shard .* (does not exist|not found|for rank [0-9]+ is missing)|No such file)",
       "3.1", "5.5", "3.1"},
      {"corrupt shard",
       R"(checksum mismatch|truncated|shard .* has [0-9]+ bytes|shard .* of rank [0-9]+ is corrupt)",
       "4.10", "5.5", nullptr},
      {"shm setup",
       R"(creat(e|ing) shared memory segment|could not create or map its segment|posix_fallocate failed|ncclShmOpen)",
       "2.1", "2.1", nullptr},
      {"disk full", R"(No space left on device|disk full)", "4.2", "5.2", nullptr},
      {"oom", R"(out of memory|OutOfMemoryError|DefaultCPUAllocator: not enough memory)", "4.2",
       "5.2", "3.4"},
      {"kernel tail", R"(kernel '.*' of plugin '.*' cannot)", "4.3", "5.1", nullptr},
      {"device ordinal", R"(invalid device ordinal|no device)", "4.9", "5.7", nullptr},
      {"loss scale", R"(loss scale .*(minimum|gave up)|gradient overflow)", "4.4", "4.4", nullptr},
      {"tp diverge", R"(tensor-parallel outputs diverge)", "5.9", "5.9", nullptr},
      {"collective mismatch", R"(collective mismatch|called [a-z_]+\(count)", "4.6", "5.1",
       nullptr},
      {"comm timeout", R"(comm timeout|timed out|deadline exceeded|watchdog)", "4.7", "5.1", "2.2"},
      {"killed",
       R"(Killed|oom-kill|Segmentation fault|core dumped|Signal 9 \(SIGKILL\)|exitcode: -9)", "4.8",
       "5.1", nullptr},
  };
  return s;
}

const LogsSignature* classify(const std::string& line) {
  static const std::vector<std::regex> compiled = [] {
    std::vector<std::regex> out;
    for (const auto& s : logs_signatures()) {
      out.emplace_back(s.pattern,
                       std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
    }
    return out;
  }();
  // The detector's mask: a word of a path (`/data/truncated_wiki/`) is no event.
  const std::string text = mask_paths(line);
  for (size_t i = 0; i < compiled.size(); ++i) {
    if (std::regex_search(text, compiled[i])) return &logs_signatures()[i];
  }
  return nullptr;
}

namespace {

// Events of a running job: a collective timeout, an OOM, the loss scale, a checkpoint.
std::vector<Example> training_events() {
  return {
      // workloads/comm/communicator.cpp
      {"comm timeout",
       "comm timeout",
       "[rank 0] comm timeout: all_reduce on group 'dp' (seq 202, count 1536, dtype fp32, reduce "
       "sum) did not complete after 2003 ms (timeout 2000 ms); flight recorder dumped to "
       "/tmp/faultline/flight_recorder_rank0.json",
       {"[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=202, OpType=ALLREDUCE, NumelIn=1536, NumelOut=1536, "
        "Timeout(ms)=2000) ran for 2003 milliseconds before timing out.",
        "[rank0]:[E ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception "
        "(either an error or timeout) detected by watchdog at work: 202, last enqueued NCCL "
        "work: 202, last completed NCCL work: 201."},
       "workloads/comm/communicator.cpp",
       "[rank {}] comm timeout: {}; flight recorder dumped to {}",
       "2.2-first-collective-timeout"},
      // kernels/cpu/memory.cpp
      {"oom",
       "out of memory",
       "[rank 0] out of memory on cuda:0: tried to allocate 20.00 MiB for 'act.h'; 100.00 MiB "
       "already allocated, budget 110.00 MiB (10.00 MiB free), peak 100.00 MiB",
       {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 110.00 MiB of which 10.00 MiB is free. Including non-PyTorch memory, "
        "this process has 100.00 MiB memory in use. Of the allocated memory 100.00 MiB is "
        "allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"},
       "kernels/cpu/memory.cpp",
       "[rank {}] out of memory on {}: tried to allocate {} for '{}'; {} already ",
       "4.2-smaller-device-oom"},
      // kernels/cpu/loss_scaler.cpp
      {"loss scale",
       "loss scale",
       "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run. "
       "(gradient overflow at step 12 with the loss scale already at its minimum 1; 9 steps "
       "skipped so far)",
       {"Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run."},
       "kernels/loss_scaler.hpp",
       "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
       "4.4-loss-scale-collapse"},
      // workloads/train/checkpoint.cpp
      {"size mismatch",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_10 does not fit this model: size mismatch for wte: "
       "[96 x 32] in the checkpoint, [128 x 32] in this model (checkpoint model: vocab 96, "
       "d_model 32, layers 2, heads 4, seq_len 64)",
       {"RuntimeError: Error(s) in loading state_dict for GPT2Model:",
        "\tsize mismatch for wte: copying a param with shape torch.Size([96, 32]) from "
        "checkpoint, the shape in current model is torch.Size([128, 32])."},
       "workloads/train/checkpoint.cpp",
       "checkpoint {} does not fit this model: size mismatch for {} (checkpoint model: vocab ",
       "5.8-vocab-padding-mismatch"},
  };
}

// Events of setting up: the store, the rendezvous, building and loading kernel plugins.
std::vector<Example> setup_events() {
  return {
      // workloads/rendezvous/store_server.cpp
      {"address in use",
       "store",
       "rendezvous store cannot listen on 127.0.0.1:29500: address already in use (EADDRINUSE): "
       "another process holds it",
       {"RuntimeError: The server socket has failed to listen on any local network address. The "
        "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). "
        "The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in "
        "use)."},
       "workloads/rendezvous/store_server.cpp",
       "rendezvous store cannot listen on {}:{}: {}",
       "2.1-port-conflict"},
      // workloads/rendezvous/store_client.cpp
      {"store unreachable",
       "store",
       "cannot reach the rendezvous store at 127.0.0.1:29500: connection refused (ECONNREFUSED) "
       "on every attempt for 3000 ms (12 attempts); nothing is listening there: check "
       "MASTER_ADDR/MASTER_PORT and that the store (rank 0 or the harness) is up",
       {"HOST:PID:TID [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to "
        "127.0.0.1<29500> returned 111(Connection refused) errno 115(Operation now in progress)",
        "torch.distributed.DistNetworkError: The client socket has timed out after 3000ms while "
        "trying to connect to (127.0.0.1, 29500)."},
       "workloads/rendezvous/store_client.cpp",
       "cannot reach the rendezvous store at {}: {} on every attempt for {} ms ",
       "2.2-store-behind-firewall"},
      // workloads/rendezvous/world_check.cpp
      {"rank missing",
       "rendezvous",
       "rendezvous timed out after 3000 ms (timeout 3000 ms) at store 127.0.0.1:29500: 2 of 4 "
       "ranks arrived (ranks 0-1); missing: ranks 2-3",
       {"torch.distributed.DistStoreError: Timed out after 4 seconds waiting for clients. 2/4 "
        "clients joined."},
       "workloads/rendezvous/world_check.cpp",
       "rendezvous timed out after {} ms (timeout {} ms) at store {}: {} of {} ",
       "2.2-rank-never-joins"},
      // kernels/cpu/plugin.cpp
      {"build failed",
       "plugin",
       "building kernel plugin 'fused_adam' failed (compiler exit status 127): sh: 1: c++: not "
       "found [CXX=c++ CXXFLAGS=-O2 -fPIC; log: /tmp/faultline/plugins/fused_adam.log]",
       {"RuntimeError: Error building extension 'fused_adam'"},
       "kernels/cpu/plugin.cpp",
       "building kernel plugin '{}' failed (compiler exit status {}): {} [CXX={} CXXFLAGS={}; ",
       "1.1-jit-build-no-compiler"},
      // kernels/cpu/plugin.cpp (no PyTorch counterpart)
      {"import failed",
       "plugin",
       "cannot load kernel plugin 'fused_adam': libfused_adam.so: cannot open shared object "
       "file: No such file or directory (searched FAULTLINE_PLUGIN_PATH=<unset>)",
       {},
       "kernels/cpu/plugin.cpp",
       "cannot load kernel plugin '{}': {} (searched FAULTLINE_PLUGIN_PATH={})",
       "1.2-plugin-import-failure"},
      // kernels/cpu/plugin.cpp (no PyTorch counterpart)
      {"no kernel image",
       "plugin",
       "kernel plugin 'fused_adam': no kernel image is available for execution on the device "
       "(device capability 8.0, plugin built for 7.0; rebuild it with FAULTLINE_ARCH_LIST "
       "including 8.0)",
       {},
       "kernels/cpu/plugin.cpp",
       "kernel plugin '{}': no kernel image is available for execution on the device ",
       "5.7-plugin-not-built-for-device"},
  };
}

// Events that print faultline's sentence in both dialects: a run's setup and layout checks.
// The data plane's set-up (workloads/comm/).
std::vector<Example> comm_setup_events() {
  return {// workloads/comm/shm_transport.cpp (FAULTLINE_SHM_ALLOCATE=reserve)
          {"shm setup",
           "comm",
           "shared-memory transport on group 'dp': cannot create shared memory segment "
           "/dev/shm/faultline-shm-0f0a8232c62c4c7e-3 (size 25165824): posix_fallocate failed: No "
           "space left on device (/dev/shm cannot hold the transport's segments: give the job a "
           "larger /dev/shm) (set NCCL_SHM_DISABLE=1 to use the network path)",
           {"torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error (run with "
            "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
            "device error. ",
            "Last error:",
            "Error while creating shared memory segment /dev/shm/faultline-shm-0f0a8232c62c4c7e-3 "
            "(size 25165824)"},
           "workloads/comm/shm_transport.cpp",
           "shared-memory transport on group '{}': {} (set NCCL_SHM_DISABLE=1 to use the network "
           "path)",
           "docker-default-shm-fails-the-shm-transport-set-up"}};
}

std::vector<Example> layout_events() {
  return {
      {"fetch failed",
       "artifact",
       "cannot fetch artifact 'tokenizer.json' after 3 attempts: "
       "http://127.0.0.1:9/models/gpt-tiny/tokenizer.json: Connection refused",
       {},
       "workloads/rendezvous/artifacts.cpp",
       "cannot fetch artifact '{}' after {} attempts: {}",
       "1.3-artifact-mirror-unreachable"},
      {"world mismatch",
       "rendezvous",
       "rendezvous failed: world size mismatch: rank 3 reports world size 8, ranks 0-2 report "
       "world size 4",
       {},
       "workloads/rendezvous/world_check.cpp",
       "rendezvous failed: {} mismatch: ",
       "2.1-world-size-mismatch"},
      {"layout too large",
       "config",
       "invalid layout: model-parallel size (tp 4 x pp 1) is larger than the world size 2",
       {},
       "workloads/model/config.cpp",
       "invalid layout: model-parallel size (tp {} x pp {}) is larger than the world size {}",
       "2.3-model-parallel-larger-than-world"},
      {"zero + pp",
       "config",
       "invalid layout: ZeRO stage 2 cannot be combined with pipeline parallelism (pp 2); use "
       "ZeRO-1 with pipelines",
       {},
       "workloads/model/config.cpp",
       "invalid layout: ZeRO stage {} cannot be combined with pipeline parallelism (pp {}); use "
       "ZeRO-1 with pipelines",
       "3.2-zero2-with-pipeline"},
      {"device ordinal",
       "device",
       "[rank 1] invalid device ordinal: LOCAL_RANK 1 selects device 1, but 1 device(s) are "
       "visible on node 0 (FAULTLINE_VISIBLE_DEVICES='0', 2 on the node)",
       {},
       "workloads/comm/bootstrap.cpp",
       "[rank {}] invalid device ordinal: {} {} selects device {}, but {} device(s) are visible "
       "on node {} ({}='{}', {} on the node)",
       "4.9-device-not-visible"},
  };
}

// Events of a running job that print faultline's sentence in both dialects.
std::vector<Example> step_events() {
  return {
      {"token out of vocab",
       "error",
       "token id 77 at position 2 is outside the vocabulary (size 64)",
       {},
       "workloads/model/gpt_vocab.cpp",
       "token id {} at position {} is outside the vocabulary (size {})",
       "3.3-tokenizer-vocab-larger-than-model"},
      {"replicas differ",
       "error",
       "[rank 0] parameters differ across data-parallel replicas at step 2: dp rank 0 has xxh64 "
       "c82054fc26c4e2f2, dp rank 1 has 21007985d32fd620 (replicas must hold identical weights)",
       {},
       "workloads/train/trainer.cpp",
       "[rank {}] parameters differ across data-parallel replicas at step {}: dp rank 0 has xxh64 "
       "{:016x}, dp rank {} has {:016x} (replicas must hold identical weights)",
       "3.5-replicas-initialised-differently"},
      {"kernel tail",
       "error",
       "kernel 'adamw' of plugin 'fused_adamw_vec16' cannot run on 10027 elements: it handles "
       "multiples of 16 only (11 left over)",
       {},
       "kernels/cpu/ops.cpp",
       "kernel 'adamw' of plugin '{}' cannot run on {} elements: it handles multiples of {} only "
       "({} left over)",
       "4.3-vectorised-kernel-without-tail"},
      {"collective mismatch",
       "comm mismatch",
       "[rank 0] collective mismatch on group 'dp': rank 1 called all_reduce(count 30080, dtype "
       "fp16, reduce avg) at seq 2; rank 0 called all_reduce(count 30080, dtype fp32, reduce avg) "
       "at seq 2",
       {},
       "workloads/comm/communicator.cpp",
       "[rank {}] collective mismatch on group '{}': ",
       "4.6-dtype-mismatch-allreduce"},
      // Serving (workloads/infer/engine.cpp).
      {"tp diverge",
       "error",
       "[rank 0] tensor-parallel outputs diverge: request 0 position 4 (call 0): tp rank 0 "
       "produced token 1, tp rank 1 produced token 5",
       {},
       "workloads/infer/engine.cpp",
       "[rank {}] tensor-parallel outputs diverge: request {} position {} (call {}): tp rank 0 "
       "produced token {}, tp rank {} produced token {}",
       "5.9-unshared-sampling-seed"},
  };
}

// Checkpoint events (workloads/train/checkpoint*.cpp), faultline's sentence in both dialects.
std::vector<Example> checkpoint_events() {
  return {
      {"format version",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_3 has format version 2, this build reads version 1 "
       "(it was written by another release of the trainer; load it with that release or convert "
       "it)",
       {},
       "workloads/train/checkpoint.cpp",
       "checkpoint {} has format version {}, this build reads version {} (it was written by "
       "another release of the trainer; load it with that release or convert it)",
       "4.12-checkpoint-from-another-release"},
      {"other layout",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_3 was saved with layout dp 4 x tp 1 x pp 1 (ZeRO 0, "
       "world 4) but this run is dp 2 x tp 1 x pp 1 (ZeRO 0, world 2); a sharded checkpoint only "
       "loads into the layout that wrote it (convert it first: fl-ckpt reshard --in "
       "/tmp/faultline/ckpt/step_3 --out DIR --dp 2)",
       {},
       "workloads/train/checkpoint_trainer.cpp",
       "checkpoint {} was saved with layout {} but this run is {}; a sharded checkpoint only "
       "loads into the layout that wrote it{}",
       "4.10-checkpoint-from-another-layout"},
      // Printed by rank 0 on stdout as a note ("# ..."), not an error: training goes on.
      {"lost latest",
       nullptr,
       "auto-resume: no 'latest' file in /tmp/faultline/ckpt although it holds step_8: nothing "
       "resumed, training starts again from step 0",
       {},
       "workloads/train/checkpoint.cpp",
       "auto-resume: no 'latest' file in {} although it holds step_{}: nothing resumed, "
       "training starts again from step 0",
       "4.5-auto-resume-lost-pointer",
       "# ",
       "workload.steps=12 workload.model=tiny"},  // 1 s instead of a minute
      {"missing shard",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_4: shard shard_rank0.bin for rank 0 is missing",
       {},
       "workloads/train/checkpoint.cpp",
       "checkpoint {}: shard {} for rank {} is missing",
       "3.1-missing-shard-at-load"},
      {"corrupt shard",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_4: shard shard_rank1.bin of rank 1 is corrupt: 361082 "
       "bytes with xxh64 361f36652776a136, the manifest says 361182 bytes with xxh64 "
       "8aea26e4d57cd71b",
       {},
       "workloads/train/checkpoint.cpp",
       "checkpoint {}: shard {} of rank {} is corrupt: {} bytes with xxh64 {}, the manifest says "
       "{} bytes with xxh64 {}",
       "4.10-truncated-shard-resume"},
      {"disk full",
       "checkpoint",
       "cannot write checkpoint file /tmp/faultline/ckpt/step_2/shard_rank0.bin.tmp.12058 (16384 "
       "of 361178 bytes written): No space left on device",
       {},
       "workloads/train/checkpoint.cpp",
       "cannot write checkpoint file {} ({} of {} bytes written): {}",
       "4.2-offload-disk-full"},
  };
}

}  // namespace

const std::vector<NoProducer>& no_producer() {
  static const std::vector<NoProducer> n = {
      {"killed",
       "its ranks die of the signal and print nothing (the harness records the signal in the "
       "rank's exit)"},
  };
  return n;
}

const std::vector<Example>& examples() {
  // One event per row, worded as the workloads word it (the sources named); dialect_test throws
  // each as its exception class through the worker's error path and compares what it prints.
  static const std::vector<Example> e = [] {
    std::vector<Example> out = training_events();
    for (auto* more :
         {setup_events, comm_setup_events, layout_events, step_events, checkpoint_events}) {
      for (auto& x : more()) out.push_back(std::move(x));
    }
    return out;
  }();
  return e;
}

std::string faultline_line(const Example& e) {
  if (e.kind == nullptr) return std::string(e.lead ? e.lead : "") + e.message;
  return std::string("faultline worker error (") + e.kind + "): " + e.message;
}

std::vector<ScenarioRef> load_scenario_refs(const std::vector<std::string>& dirs) {
  std::vector<ScenarioRef> out;
  for (const auto& d : dirs) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      YAML::Node doc;
      try {
        doc = YAML::LoadFile(f.string());
      } catch (const YAML::Exception&) {
        continue;
      }
      std::string sym;
      for (const char* key : {"expect", "reference"}) {
        const YAML::Node n = doc[key];
        if (sym.empty() && n.IsMap() && n["symptom"] && n["symptom"].IsScalar())
          sym = n["symptom"].as<std::string>();
      }
      if (!sym.empty()) out.push_back({f.stem().string(), fs::path(d).filename().string(), sym});
    }
  }
  return out;
}

namespace {

const Example* example_of(const std::string& signature) {
  for (const auto& e : examples()) {
    if (signature == e.signature) return &e;
  }
  return nullptr;
}

const NoProducer* no_producer_of(const std::string& signature) {
  for (const auto& n : no_producer()) {
    if (signature == n.signature) return &n;
  }
  return nullptr;
}

Match match_of(const LogsSignature& s, const Example* ex, size_t line) {
  Match m;
  m.signature = s.name;
  m.train = s.train;
  m.serve = s.serve;
  m.before_first = s.train_before_first_step ? s.train_before_first_step : "";
  m.line = line;
  if (ex == nullptr) {
    const NoProducer* n = no_producer_of(s.name);
    m.no_producer = n ? n->why : "no example of it is kept";
    return m;
  }
  const Example& e = *ex;
  m.faultline = faultline_line(e);
  m.pytorch = m.faultline;
  // The pytorch line this signature reads (a state_dict error's second line, not its first).
  for (const char* p : e.pytorch) {
    std::string l = p;
    l.erase(0, l.find_first_not_of(" \t"));
    if (classify(l) == &s) {
      m.pytorch = l;
      break;
    }
  }
  return m;
}

// fl-detect-logs reads the event as `symptom` (in training, serving or before the first step).
bool reads_as(const LogsSignature& s, const std::string& symptom) {
  return symptom == s.train || symptom == s.serve ||
         (s.train_before_first_step != nullptr && symptom == s.train_before_first_step);
}

}  // namespace

namespace {

// `top`: cs[0] is the answer's top candidate (a declined answer's guesses have none).
void annotate_candidates(std::vector<Candidate>& cs, bool top,
                         const std::vector<ScenarioRef>& refs) {
  for (size_t i = 0; i < cs.size(); ++i) {
    Candidate& c = cs[i];
    Produced p;
    for (const auto& s : refs) {
      if (s.symptom != c.id) continue;
      if (p.scenarios.size() < 3) {
        p.scenarios.push_back(s.name);
      } else {
        ++p.more_scenarios;
      }
    }
    if (p.scenarios.empty()) continue;  // faultline does not produce this symptom
    // The events the evidence reports, as fl-detect-logs reads them (at most two): under the top
    // candidate, and under another only when fl-detect-logs reads the event as that symptom (a
    // watchdog line is not evidence of the runtime error the ranker filled in beside it).
    for (const auto& e : c.evidence) {
      const LogsSignature* s = classify(e.text);
      if (!s || p.matches.size() >= 2 || ((i > 0 || !top) && !reads_as(*s, c.id))) continue;
      const bool seen = std::any_of(p.matches.begin(), p.matches.end(),
                                    [&](const Match& m) { return m.signature == s->name; });
      if (!seen) p.matches.push_back(match_of(*s, example_of(s->name), e.line));
    }
    if (p.matches.empty()) continue;  // no evidence line is an event fl-detect-logs reads
    c.faultline = std::move(p);
  }
}

}  // namespace

void annotate(Result& r, const std::vector<ScenarioRef>& refs) {
  annotate_candidates(r.symptoms, true, refs);
  annotate_candidates(r.guesses, false, refs);  // stop 55: a declined answer's ranked guesses
}

}  // namespace fl::triage::dialect
