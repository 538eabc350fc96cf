#include "harness/triage/dialect.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <regex>

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
      {"missing shard", R"(missing shard|shard .* (does not exist|not found)|No such file)", "3.1",
       "5.5", "3.1"},
      {"corrupt shard", R"(checksum mismatch|truncated|shard .* has [0-9]+ bytes)", "4.10", "5.5",
       nullptr},
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
  for (size_t i = 0; i < compiled.size(); ++i) {
    if (std::regex_search(line, compiled[i])) return &logs_signatures()[i];
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
        "work: 202, last completed NCCL work: 201."}},
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
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"}},
      // kernels/cpu/loss_scaler.cpp
      {"loss scale",
       "loss scale",
       "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run. "
       "(gradient overflow at step 12 with the loss scale already at its minimum 1; 9 steps "
       "skipped so far)",
       {"Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run."}},
      // workloads/train/checkpoint.cpp
      {"size mismatch",
       "checkpoint",
       "checkpoint /tmp/faultline/ckpt/step_10 does not fit this model: size mismatch for wte: "
       "[96 x 32] in the checkpoint, [128 x 32] in this model (checkpoint model: vocab 96, "
       "d_model 32, layers 2, heads 4, seq_len 64)",
       {"RuntimeError: Error(s) in loading state_dict for GPT2Model:",
        "\tsize mismatch for wte: copying a param with shape torch.Size([96, 32]) from "
        "checkpoint, the shape in current model is torch.Size([128, 32])."}},
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
        "use)."}},
      // workloads/rendezvous/store_client.cpp
      {"store unreachable",
       "store",
       "cannot reach the rendezvous store at 127.0.0.1:29500: connection refused (ECONNREFUSED) "
       "on every attempt for 3000 ms (12 attempts); nothing is listening there: check "
       "MASTER_ADDR/MASTER_PORT and that the store (rank 0 or the harness) is up",
       {"HOST:PID:TID [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to "
        "127.0.0.1<29500> returned 111(Connection refused) errno 115(Operation now in progress)",
        "torch.distributed.DistNetworkError: The client socket has timed out after 3000ms while "
        "trying to connect to (127.0.0.1, 29500)."}},
      // workloads/rendezvous/world_check.cpp
      {"rank missing",
       "rendezvous",
       "rendezvous timed out after 3000 ms (timeout 3000 ms) at store 127.0.0.1:29500: 2 of 4 "
       "ranks arrived (ranks 0-1); missing: ranks 2-3",
       {"torch.distributed.DistStoreError: Timed out after 4 seconds waiting for clients. 2/4 "
        "clients joined."}},
      // kernels/cpu/plugin.cpp
      {"build failed",
       "plugin",
       "building kernel plugin 'fused_adam' failed (compiler exit status 127): sh: 1: c++: not "
       "found [CXX=c++ CXXFLAGS=-O2 -fPIC; log: /tmp/faultline/plugins/fused_adam.log]",
       {"RuntimeError: Error building extension 'fused_adam'"}},
      // kernels/cpu/plugin.cpp (no PyTorch counterpart)
      {"import failed",
       "plugin",
       "cannot load kernel plugin 'fused_adam': libfused_adam.so: cannot open shared object "
       "file: No such file or directory (searched FAULTLINE_PLUGIN_PATH=<unset>)",
       {}},
      // kernels/cpu/plugin.cpp (no PyTorch counterpart)
      {"no kernel image",
       "plugin",
       "kernel plugin 'fused_adam': no kernel image is available for execution on the device "
       "(device capability 8.0, plugin built for 7.0; rebuild it with FAULTLINE_ARCH_LIST "
       "including 8.0)",
       {}},
  };
}

}  // namespace

const std::vector<Example>& examples() {
  // One event per row, worded as the workloads word it (the sources named); dialect_test throws
  // each as its exception class through the worker's error path and compares what it prints.
  static const std::vector<Example> e = [] {
    std::vector<Example> out = training_events();
    for (auto& x : setup_events()) out.push_back(std::move(x));
    return out;
  }();
  return e;
}

std::string faultline_line(const Example& e) {
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

Match match_of(const LogsSignature& s, const Example& e, size_t line) {
  Match m{
      s.name, s.train, s.serve,          s.train_before_first_step ? s.train_before_first_step : "",
      line,   "",      faultline_line(e)};
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

void annotate(Result& r, const std::vector<ScenarioRef>& refs) {
  for (size_t i = 0; i < r.symptoms.size(); ++i) {
    Candidate& c = r.symptoms[i];
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
      const Example* ex = s ? example_of(s->name) : nullptr;
      if (!ex || p.matches.size() >= 2 || (i > 0 && !reads_as(*s, c.id))) continue;
      const bool seen = std::any_of(p.matches.begin(), p.matches.end(),
                                    [&](const Match& m) { return m.signature == s->name; });
      if (!seen) p.matches.push_back(match_of(*s, *ex, e.line));
    }
    if (p.matches.empty()) continue;  // no evidence line is an event faultline prints
    c.faultline = std::move(p);
  }
}

}  // namespace fl::triage::dialect
