// The pytorch dialect of the workers' error lines has the shapes real logs have. Each regex is
// built from real lines quoted in public issues (cited per test); the numbers come from the event.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "base/error.hpp"
#include "kernels/memory.hpp"
#include "workloads/comm/errors.hpp"
#include "workloads/comm/log_dialect.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/rendezvous/store_client.hpp"

namespace fl::comm {
namespace {

bool matches(const std::string& line, const char* re) {
  return std::regex_search(line, std::regex(re));
}

// NVIDIA/Megatron-LM#1207, hiyouga/LlamaFactory#7396, XPixelGroup/BasicSR#737:
// "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective
// operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523,
// Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
const char* kWatchdog =
    R"(^\[rank([0-9]+)\]:\[E[^\]]*ProcessGroupNCCL\.cpp:[0-9]+\] \[Rank ([0-9]+)\] Watchdog caught )"
    R"(collective operation timeout: WorkNCCL\(SeqNum=([0-9]+), OpType=([A-Z_]+), )"
    R"(NumelIn=([0-9]+), NumelOut=([0-9]+), Timeout\(ms\)=([0-9]+)\) ran for ([0-9]+) )"
    R"(milliseconds before timing out\.$)";

TEST(LogDialect, WatchdogLineHasTheRealShapeAndTheEventsNumbers) {
  TimeoutInfo t{41, "ALLREDUCE", 1536, 1536, 2000, 2003};
  const std::string line = watchdog_timeout_line(3, t);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex(kWatchdog))) << line;
  EXPECT_EQ(m[1], "3");
  EXPECT_EQ(m[2], "3");
  EXPECT_EQ(m[3], "41");
  EXPECT_EQ(m[4], "ALLREDUCE");
  EXPECT_EQ(m[5], "1536");
  EXPECT_EQ(m[7], "2000");
  EXPECT_EQ(m[8], "2003");
  // And the real line itself passes the same regex (the regex is not fitted to ours only).
  EXPECT_TRUE(matches(
      "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
      "NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
      kWatchdog));
}

TEST(LogDialect, OpTypesAreC10dNames) {
  EXPECT_STREQ(pytorch_op_type(0), "ALLREDUCE");
  EXPECT_STREQ(pytorch_op_type(1), "_REDUCE_SCATTER_BASE");  // hiyouga/LlamaFactory#6269
  EXPECT_STREQ(pytorch_op_type(3), "BROADCAST");             // NVIDIA/nccl#1409
}

// pytorch/pytorch#16417 (2024 comment), murong-xu/CADS#4: "torch.OutOfMemoryError: CUDA out of
// memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB
// is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the
// allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but
// unallocated. ..."
const char* kOom =
    R"(^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate ([0-9.]+ [KMG]iB|[0-9]+ bytes)\. )"
    R"(GPU ([0-9]+) has a total capacity of ([0-9.]+ [KMG]iB|[0-9]+ bytes) of which )"
    R"(([0-9.]+ [KMG]iB|[0-9]+ bytes) is free\. Including non-PyTorch memory, this process has )"
    R"((?:[0-9.]+ [KMG]iB|[0-9]+ bytes) memory in use\. Of the allocated memory )"
    R"(([0-9.]+ [KMG]iB|[0-9]+ bytes) is allocated by PyTorch, and ([0-9.]+ [KMG]iB|[0-9]+ bytes) )"
    R"(is reserved by PyTorch but unallocated\.)";

TEST(LogDialect, OomLineHasTheRealShapeAndTheEventsBytes) {
  const OutOfMemoryError e("[rank 0] out of memory on cpu: ...", 20u << 20, 100u << 20, 110u << 20);
  auto lines = pytorch_lines(e, "out of memory", 0);
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lines[0], m, std::regex(kOom))) << lines[0];
  EXPECT_EQ(m[1], "20.00 MiB");
  EXPECT_EQ(m[3], "110.00 MiB");
  EXPECT_EQ(m[4], "10.00 MiB");
  EXPECT_EQ(m[5], "100.00 MiB");
  EXPECT_TRUE(matches(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a "
      "total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, "
      "this process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated "
      "by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated.",
      kOom));
  EXPECT_EQ(torch_bytes(0), "0 bytes");
}

// sgl-project/sglang#3820: "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect:
// Connect to 10.0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)";
// vllm-project/vllm#19670: "torch.distributed.DistNetworkError: The client socket has timed out
// after 600000ms while trying to connect to (172.17.0.9, 46229)."
const char* kNcclWarn = R"(^[^:\s]+:[0-9]+:[0-9]+ \[[0-9]+\] [a-z/_]+\.cc:[0-9]+ NCCL WARN \S)";

TEST(LogDialect, RefusedStoreGivesNcclWarnAndDistNetworkError) {
  const rdzv::StoreError e(rdzv::StoreErrorKind::kRefused,
                           "cannot reach the rendezvous store at 127.0.0.1:29517: connection "
                           "refused (ECONNREFUSED) on every attempt for 3000 ms (12 attempts)");
  auto lines = pytorch_lines(e, "store", 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(matches(lines[0], kNcclWarn)) << lines[0];
  EXPECT_NE(lines[0].find("Connect to 127.0.0.1<29517> returned 111(Connection refused)"),
            std::string::npos);
  EXPECT_EQ(lines[1],
            "torch.distributed.DistNetworkError: The client socket has timed out after 3000ms "
            "while trying to connect to (127.0.0.1, 29517).");
  EXPECT_TRUE(
      matches("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect "
              "to 10.0.0.4<56849> returned 113(No route to host)",
              kNcclWarn));
}

// showlab/Tune-A-Video#90: "RuntimeError: The server socket has failed to listen on any local
// network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address
// already in use). ..."
TEST(LogDialect, TakenPortGivesTheServerSocketLine) {
  const std::runtime_error e(
      "rendezvous store cannot listen on 127.0.0.1:29500: address already in use (EADDRINUSE)");
  auto lines = pytorch_lines(e, "store", 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(matches(lines[0],
                      R"(^RuntimeError: The server socket has failed to listen on any local )"
                      R"(network address\. The server socket has failed to bind to \[::\]:29500 )"
                      R"(\(errno: 98 - Address already in use\)\.)"));
}

TEST(LogDialect, TimeoutErrorCarriesItsOpAndPrintsTwoWatchdogLines) {
  const CommTimeoutError e("[rank 1] comm timeout: ...", "/tmp/x",
                           {7, "ALLREDUCE", 8, 8, 500, 512});
  auto lines = pytorch_lines(e, "comm timeout", 1);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(matches(lines[0], kWatchdog)) << lines[0];
  // hiyouga/LlamaFactory#7396: "... detected by watchdog at work: 1580, last enqueued NCCL work:
  // 1582, last completed NCCL work: 1579."
  EXPECT_TRUE(matches(lines[1], R"(Exception \(either an error or timeout\) detected by watchdog )"
                                R"(at work: 7, last enqueued NCCL work: 7, last completed NCCL )"
                                R"(work: 6\.$)"));
}

// OpenRLHF/OpenRLHF#1040: "torch.distributed.DistStoreError: Timed out after 1801 seconds
// waiting for clients. 1/3 clients joined."
TEST(LogDialect, RanksThatNeverJoinGiveTheStoresTimeout) {
  const std::runtime_error e(
      "rendezvous timed out after 3000 ms (timeout 3000 ms) at store 10.200.0.1:24038: 2 of 4 "
      "ranks arrived (ranks 0-1); missing: ranks 2-3");
  auto lines = pytorch_lines(e, "rendezvous", 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(matches(lines[0],
                      R"(^torch\.distributed\.DistStoreError: Timed out after [0-9]+ seconds )"
                      R"(waiting for clients\. 2/4 clients joined\.$)"))
      << lines[0];
}

// pytorch/torchtitan#853 (NCCL 2.21.5 under PyTorch): "torch.distributed.DistBackendError: NCCL
// error in: ...NCCLUtils.hpp:268, unhandled system error ...", then NCCL's last warning "Error
// while creating shared memory segment /dev/shm/nccl-1YsMbG (size 7340384)".
TEST(LogDialect, ASharedMemorySegmentThatCannotBeReservedGivesNcclsSystemError) {
  const std::runtime_error e(
      "shared-memory transport on group 'world': cannot create shared memory segment "
      "/dev/shm/faultline-shm-x-2 (size 25165824): posix_fallocate failed: No space left on device "
      "(/dev/shm cannot hold the transport's segments: give the job a larger /dev/shm) (set "
      "NCCL_SHM_DISABLE=1 to use the network path)");
  auto lines = pytorch_lines(e, "comm", 2);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(matches(lines[0],
                      R"(^torch\.distributed\.DistBackendError: NCCL error in: .*NCCLUtils\.hpp:)"
                      R"([0-9]+, unhandled system error \(run with NCCL_DEBUG=INFO for details\))"))
      << lines[0];
  EXPECT_TRUE(matches(lines[1], R"(^ncclSystemError: System call)")) << lines[1];
  EXPECT_EQ(lines[2], "Last error:");
  EXPECT_EQ(
      lines[3],
      "Error while creating shared memory segment /dev/shm/faultline-shm-x-2 (size 25165824)");
  // Only a comm error of the transport reads so; a peer's "could not create" has no NCCL text.
  EXPECT_TRUE(pytorch_lines(e, "store", 2).empty());
  const std::runtime_error peer(
      "shared-memory transport on group 'world': a peer could not create or map its segment");
  EXPECT_TRUE(pytorch_lines(peer, "comm", 1).empty());
}

TEST(LogDialect, EventsWithoutARealCounterpartKeepFaultlinesLine) {
  const std::runtime_error e("tensor-parallel outputs diverge: request 3 position 2");
  EXPECT_TRUE(pytorch_lines(e, "error", 0).empty());
}

TEST(LogDialect, FidelitySettingDefaultsToFaultlineAndRejectsOthers) {
  ::unsetenv("FAULTLINE_LOG_FIDELITY");
  kLogFidelity.reset();
  EXPECT_EQ(kLogFidelity.get(), "faultline");
  EXPECT_FALSE(pytorch_dialect());
  ::setenv("FAULTLINE_LOG_FIDELITY", "pytorch", 1);
  kLogFidelity.reset();
  EXPECT_TRUE(pytorch_dialect());
  kLogFidelity.set("torch");
  EXPECT_THROW(pytorch_dialect(), SettingError);
  ::unsetenv("FAULTLINE_LOG_FIDELITY");
  kLogFidelity.reset();
}

// What a failing worker prints: faultline's sentence by default (the oracles' patterns match it),
// the real lines instead under pytorch.
std::string stderr_of_failing_worker() {
  testing::internal::CaptureStderr();
  run_worker_main([]() -> int {
    throw CommTimeoutError("[rank 0] comm timeout: all_reduce seq 4 did not complete", "/tmp/d",
                           {4, "ALLREDUCE", 16, 16, 100, 101});
  });
  return testing::internal::GetCapturedStderr();
}

TEST(LogDialect, DefaultDialectPrintsFaultlinesSentenceUnchanged) {
  ::unsetenv("FAULTLINE_LOG_FIDELITY");
  kLogFidelity.reset();
  const std::string err = stderr_of_failing_worker();
  EXPECT_NE(err.find("faultline worker error (comm timeout): [rank 0] comm timeout: all_reduce "
                     "seq 4 did not complete\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("Watchdog"), std::string::npos) << err;
}

TEST(LogDialect, PytorchDialectPrintsTheRealLinesInstead) {
  kLogFidelity.set("pytorch");
  const std::string err = stderr_of_failing_worker();
  kLogFidelity.reset();
  EXPECT_TRUE(std::regex_search(err, std::regex(kWatchdog, std::regex::multiline))) << err;
  EXPECT_EQ(err.find("faultline worker error"), std::string::npos) << err;
}

}  // namespace
}  // namespace fl::comm
