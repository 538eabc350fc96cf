// fl-detect-logs' signature table classifies real error texts (quoted from the public issues each
// row cites) and faultline's own sentences for the same events to the same symptom.
#include <gtest/gtest.h>

#include <string>

#include "harness/detectors/logs_signatures.hpp"

namespace fl::detect::logs {
namespace {

struct Case {
  const char* text;
  const char* signature;  // expected first match
  const char* source;     // where the text comes from
};

// Real lines from the issues behind the catalogue's symptom families.
const Case kReal[] = {
    {"[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, "
     "NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
     "comm timeout", "hiyouga/LlamaFactory#7396"},
    {"[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 "
     "milliseconds before timing out.",
     "comm timeout", "OFA-Sys/OFA#271"},
    {"[rank1]:[E1002 18:16:40.662691402 ProcessGroupNCCL.cpp:756] [Rank 1] Work "
     "WorkNCCL(SeqNum=2521, OpType=ALLREDUCE, NumelIn=160672064, NumelOut=160672064, "
     "Timeout(ms)=600000) timed out in blocking wait.",
     "comm timeout", "huggingface/diffusers#12422"},
    {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total "
     "capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this "
     "process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is allocated by "
     "PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated.",
     "oom", "murong-xu/CADS#4"},
    {"RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total "
     "capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
     "oom", "pytorch/pytorch#16417"},
    {"Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
     "run.",
     "loss scale", "deepspeedai/DeepSpeedExamples#418"},
    {"RuntimeError: Error building extension 'fused_adam'", "build failed",
     "deepspeedai/DeepSpeed#629"},
    {"[rank1]: ImportError: /home/nlp/.cache/torch_extensions/py310_cu121/cpu_adam/cpu_adam.so: "
     "cannot open shared object file: No such file or directory",
     "import failed", "deepspeedai/DeepSpeed#5723"},
    {"RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "no kernel image", "deepspeedai/DeepSpeed#5724"},
    {"RuntimeError: The server socket has failed to listen on any local network address. The "
     "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
     "address in use", "showlab/Tune-A-Video#90"},
    {"torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 "
     "clients joined.",
     "rank missing", "OpenRLHF/OpenRLHF#1040"},
    {"torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while "
     "trying to connect to (172.17.0.9, 46229).",
     "store unreachable", "vllm-project/vllm#19670"},
    {"node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to "
     "10.0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)",
     "store unreachable", "sgl-project/sglang#3820"},
    {"gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space "
     "left on device",
     "shm setup", "NVIDIA/nccl#290"},
    {"  Error while creating shared memory segment /dev/shm/nccl-1YsMbG (size 7340384)",
     "shm setup", "pytorch/torchtitan#853"},
    {"[rank1]:        size mismatch for model.layers.1.self_attn.o_proj.weight: copying a param "
     "with shape torch.Size([1024, 1024]) from checkpoint, the shape in current model is "
     "torch.Size([4096, 4096]).",
     "size mismatch", "deepspeedai/DeepSpeed#5570"},
    {"  traceback : Signal 9 (SIGKILL) received by PID 14750", "killed", "lzhxmu/CPPO#6"},
    {"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 "
     "(pid: 812917) of binary: /data/envs/bin/python",
     "killed", "hpcaitech/ColossalAI#3514"},
};

// faultline's own sentences for the same events (the default dialect).
const Case kFaultline[] = {
    {"faultline worker error (comm): shared-memory transport on group 'dp': cannot create shared "
     "memory segment /dev/shm/faultline-shm-1-3 (size 25165824): posix_fallocate failed: No space "
     "left on device (/dev/shm cannot hold the transport's segments: give the job a larger "
     "/dev/shm) (set NCCL_SHM_DISABLE=1 to use the network path)",
     "shm setup", "faultline"},
    // The peers of the rank whose reservation failed (the same set-up, seen from the other side).
    {"faultline worker error (comm): shared-memory transport on group 'dp': a peer could not "
     "create or map its segment (set NCCL_SHM_DISABLE=1 to use the network path)",
     "shm setup", "faultline"},
    {"faultline worker error (comm timeout): [rank 1] comm timeout: all_reduce seq 41 on group "
     "'dp' did not complete after 2003 ms (timeout 2000 ms)",
     "comm timeout", "faultline"},
    {"faultline worker error (out of memory): [rank 0] out of memory on cpu: tried to allocate "
     "20.00 MiB for 'act.h'; 100.00 MiB already allocated, budget 110.00 MiB",
     "oom", "faultline"},
    {"faultline worker error (store): rendezvous store cannot listen on 127.0.0.1:29500: address "
     "already in use (EADDRINUSE)",
     "address in use", "faultline"},
    {"faultline worker error (store): cannot reach the rendezvous store at 127.0.0.1:29500: "
     "connection refused (ECONNREFUSED) on every attempt for 3000 ms",
     "store unreachable", "faultline"},
};

TEST(LogsSignatures, RealTextsClassifyToTheirSymptom) {
  for (const Case& c : kReal) {
    const Signature* s = classify(c.text);
    ASSERT_NE(s, nullptr) << c.source << ": no signature matches: " << c.text;
    EXPECT_STREQ(s->name, c.signature) << c.source << ": " << c.text;
  }
}

TEST(LogsSignatures, FaultlineSentencesClassifyToTheSameSymptom) {
  for (const Case& c : kFaultline) {
    const Signature* s = classify(c.text);
    ASSERT_NE(s, nullptr) << c.text;
    EXPECT_STREQ(s->name, c.signature) << c.text;
  }
}

TEST(LogsSignatures, BenignLinesOfRealJobsAreNotFindings) {
  // DeepSpeed prints OVERFLOW lines in healthy fp16 runs while the scale settles
  // (deepspeedai/DeepSpeed#931), and NCCL prints INFO lines at every start.
  EXPECT_EQ(classify("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] "
                     "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, "
                     "reducing to 32768"),
            nullptr);
  EXPECT_EQ(classify("node1:919:1150 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via "
                     "NET/Socket/0"),
            nullptr);
}

// The paths a line names, and the run's own name, are labels, not evidence: under faultline's
// benchmark every run directory carries its scenario's name (runs/truncated-shard-resume-s7/), and
// in the field checkpoint and cache directories are named by people. Before the mask the
// `corrupt shard` row's `truncated` read both lines below as 4.10, and `oom-kill` read a model
// directory as a kill.
TEST(LogsSignatures, PathsAndRunNamesAreNotEvidence) {
  EXPECT_EQ(classify("runs/truncated-shard-resume-s7/rank0.log: step 3 loss 2.3125"), nullptr);
  EXPECT_EQ(classify("step 3 loss 2.3125"), nullptr);
  EXPECT_EQ(classify("loading weights from /data/oom-killer-repro/model.bin"), nullptr);
  EXPECT_EQ(classify("saved to ./watchdog_runs/ckpt/step_4"), nullptr);
  // A real finding next to a path is still found, by its own words.
  const Signature* s = classify(
      "faultline worker error (comm timeout): [rank 0] comm timeout: barrier on group 'world' (seq "
      "3, count 0, dtype uint8) did not complete after 3000 ms (timeout 3000 ms); flight recorder "
      "dumped to /tmp/res/runs/truncated-shard-resume-s7/ranks/rank0/flight_recorder_rank0.json");
  ASSERT_NE(s, nullptr);
  EXPECT_STREQ(s->name, "comm timeout");
  s = classify(
      "checkpoint /tmp/res/runs/truncated-shard-resume-s7/checkpoints/step_4: shard "
      "shard_rank1.bin of rank 1 is corrupt: 361082 bytes with xxh64 361f36652776a136, the "
      "manifest says 361182 bytes with xxh64 8aea26e4d57cd71b");
  ASSERT_NE(s, nullptr);
  EXPECT_STREQ(s->name, "corrupt shard");
  EXPECT_STREQ(s->train, "4.10");
  // The run's name outside a path (a run id mismatch quotes it) is masked by the detector.
  EXPECT_EQ(mask_name("job 'killed-rank-restart-s7' started", "killed-rank-restart-s7"),
            "job '<run>' started");
  EXPECT_EQ(classify(mask_name("job 'killed-rank-restart-s7' started", "killed-rank-restart-s7")),
            nullptr);
  EXPECT_EQ(run_name("/tmp/res/runs/killed-rank-restart-s7/"), "killed-rank-restart-s7");
}

TEST(LogsSignatures, MaskKeepsWhatIsNotAPath) {
  EXPECT_EQ(mask_paths("checkpoint /a/b/step_4: shard x of rank 1"),
            "checkpoint <path>: shard x of rank 1");
  EXPECT_EQ(mask_paths("1/3 clients joined; ratio 0.5/1.0"), "1/3 clients joined; ratio 0.5/1.0");
  EXPECT_EQ(mask_paths("oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/faultline/r1,task=x"),
            "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=<path>,task=x");
  EXPECT_EQ(mask_paths("see (https://pytorch.org/docs/a.html#env)."), "see (<path>).");
  // Text without blanks between words (Chinese): the path ends at a multi-byte character.
  EXPECT_EQ(mask_paths("训练时显存不足，日志在/data/x/run.log里"),
            "训练时显存不足，日志在<path>里");
  EXPECT_EQ(mask_file_paths("加载/ckpt/step_4时报错"), "加载<path>时报错");
  EXPECT_EQ(mask_name("abcd-1 abcd abcd.log xabcd", "abcd"), "abcd-1 <run> <run>.log xabcd");
  EXPECT_EQ(mask_name("a short id", "a"), "a short id");
}

TEST(LogsSignatures, EverySignatureNamesItsSource) {
  for (const Signature& s : signatures()) {
    ASSERT_NE(s.source, nullptr);
    EXPECT_FALSE(std::string(s.source).empty()) << s.name;
  }
}

}  // namespace
}  // namespace fl::detect::logs
