// The signatures of fl-detect-logs: each a regex over one printed line (or a reported error
// message), the taxonomy symptom it means in training and in serving, and `source`: the public
// issue whose real log text the pattern was written against (docs/detectors.md lists them). Every
// pattern matches both dialects a run can print (workload.fidelity): faultline's own sentence
// and the line real PyTorch / NCCL / DeepSpeed jobs print for the same event. The first match
// wins, so the more specific signatures come first. Header-only so the unit test checks the very
// table the detector runs. `faultline triage` keeps a copy (harness/triage/dialect.cpp: the
// layering keeps harness/triage from including harness/detectors/); tests/triage/dialect_test.cpp
// fails until a change here is made there too.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include "base/text_mask.hpp"

namespace fl::detect::logs {

struct Signature {
  const char* name;
  const char* pattern;
  const char* train;  // symptom when the run trains ("" : not a finding there)
  const char* serve;  // ... when it serves
  // Before the first step a timeout or OOM belongs to an earlier stage.
  const char* train_before_first_step = nullptr;
  const char* source = "faultline";  // the issue the real text comes from (owner/repo#number)
};

inline const std::vector<Signature>& signatures() {
  static const std::vector<Signature> s = {
      {"build failed",
       R"(building kernel plugin .* failed|Error building extension '|error: .* (undeclared|was not declared)|compiler .* not found)",
       "1.1", "5.6", nullptr, "deepspeedai/DeepSpeed#629"},
      {"import failed",
       R"(cannot load kernel plugin|cannot open shared object file|undefined symbol)", "1.2",
       "5.11", nullptr, "deepspeedai/DeepSpeed#5723"},
      {"no kernel image", R"(no kernel image is available)", "5.7", "5.7", nullptr,
       "deepspeedai/DeepSpeed#5724"},
      {"fetch failed", R"(cannot fetch artifact|HTTP [45][0-9][0-9])", "1.3", "1.3"},
      {"address in use",
       R"(address already in use|cannot listen on|server socket has failed to (listen|bind))",
       "2.1", "2.1", nullptr, "showlab/Tune-A-Video#90"},
      {"world mismatch",
       R"(world size mismatch|duplicate rank|out of range for world|run id mismatch|config hash mismatch)",
       "2.1", "2.1"},
      {"rank missing",
       R"(missing: rank|ranks? never joined|waiting for (clients|workers)\. [0-9]+/[0-9]+ (clients|workers) joined)",
       "2.2", "2.2", nullptr, "OpenRLHF/OpenRLHF#1040"},
      {"store unreachable",
       R"(cannot reach the rendezvous store|connection refused|connect timed out|client socket has (timed out|failed to connect)|NCCL WARN socket(Poll|Start)?Connect)",
       "2.2", "2.2", nullptr, "vllm-project/vllm#19670, sgl-project/sglang#3820"},
      {"layout too large", R"(model-parallel size .* is larger than)", "2.3", "5.1"},
      {"zero + pp", R"(ZeRO stage [0-9] cannot be combined)", "3.2", "3.2"},
      {"token out of vocab", R"(token id [0-9]+ .*outside)", "3.3", "5.8"},
      {"replicas differ", R"(parameters differ across data-parallel replicas)", "3.5", "3.5"},
      {"format version", R"(format version [0-9]+, this build reads)", "4.12", "4.12"},
      {"other layout", R"(was saved with layout|partitioned tp [0-9]+ x pp [0-9]+)", "4.10", "5.5"},
      {"size mismatch", R"(size mismatch for)", "4.6", "5.8", nullptr,
       "deepspeedai/DeepSpeed#5570"},
      {"lost latest", R"(no 'latest' file .* although it holds)", "4.5", "4.5"},
      // The last alternatives: faultline's own sentences (workloads/train/checkpoint.cpp).
      {"missing shard",
       R"(missing shard|shard .* (does not exist|not found|for rank [0-9]+ is missing)|No such file)",
       "3.1", "5.5", "3.1"},
      {"corrupt shard",
       R"(checksum mismatch|truncated|shard .* has [0-9]+ bytes|shard .* of rank [0-9]+ is corrupt)",
       "4.10", "5.5"},
      // Before "disk full": NCCL's set-up reserving its segments on a /dev/shm that cannot hold
      // them says ENOSPC too, and it is a set-up failure (2.1), not a full disk.
      {"shm setup",
       R"(creat(e|ing) shared memory segment|could not create or map its segment|posix_fallocate failed|ncclShmOpen)",
       "2.1", "2.1", nullptr, "NVIDIA/nccl#290, pytorch/torchtitan#853"},
      {"disk full", R"(No space left on device|disk full)", "4.2", "5.2"},
      {"oom", R"(out of memory|OutOfMemoryError|DefaultCPUAllocator: not enough memory)", "4.2",
       "5.2", "3.4", "pytorch/pytorch#16417"},
      {"kernel tail", R"(kernel '.*' of plugin '.*' cannot)", "4.3", "5.1"},
      {"device ordinal", R"(invalid device ordinal|no device)", "4.9", "5.7"},
      {"loss scale", R"(loss scale .*(minimum|gave up)|gradient overflow)", "4.4", "4.4", nullptr,
       "deepspeedai/DeepSpeedExamples#418"},
      {"tp diverge", R"(tensor-parallel outputs diverge)", "5.9", "5.9"},
      {"collective mismatch", R"(collective mismatch|called [a-z_]+\(count)", "4.6", "5.1"},
      {"comm timeout", R"(comm timeout|timed out|deadline exceeded|watchdog)", "4.7", "5.1", "2.2",
       "NVIDIA/Megatron-LM#1207"},
      {"killed",
       R"(Killed|oom-kill|Segmentation fault|core dumped|Signal 9 \(SIGKILL\)|exitcode: -9)", "4.8",
       "5.1", nullptr, "hpcaitech/ColossalAI#3514"},
  };
  return s;
}

// The compiled patterns, in table order (case-insensitive).
inline const std::vector<std::regex>& compiled() {
  static const std::vector<std::regex> c = [] {
    std::vector<std::regex> out;
    for (auto& s : signatures()) {
      out.emplace_back(s.pattern,
                       std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
    }
    return out;
  }();
  return c;
}

// The first signature `line` matches, or nullptr. The paths the line names are masked first
// (base/text_mask.hpp): a directory called truncated-... or oom-killer-... is no finding. (triage's
// copy, harness/triage/dialect.cpp, masks them alike.)
inline const Signature* classify(const std::string& line) {
  const std::string text = mask_paths(line);
  for (size_t i = 0; i < compiled().size(); ++i) {
    if (std::regex_search(text, compiled()[i])) return &signatures()[i];
  }
  return nullptr;
}

}  // namespace fl::detect::logs
