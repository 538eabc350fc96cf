// NCCL's connection buffers on the device (FAULTLINE_COMM_DEVICE_BUFFERS, mpi_communicator.hpp):
// each group's first collective charges 2 x NCCL_BUFFSIZE x channels to the device budget, so a
// budget that holds the training but not the buffers fails the first collective with NCCL's
// words (NVIDIA/nccl#295), and a smaller NCCL_BUFFSIZE makes room.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "base/exit_codes.hpp"
#include "tests/support/train_run.hpp"
#include "workloads/comm/mpi_communicator.hpp"

namespace fl::test {
namespace {

struct EnvGuard {
  std::string name;
  explicit EnvGuard(std::string n, const char* v) : name(std::move(n)) {
    if (v)
      setenv(name.c_str(), v, 1);
    else
      unsetenv(name.c_str());
  }
  ~EnvGuard() { unsetenv(name.c_str()); }
};

TEST(CommBuffers, TheBytesFollowNcclsVariables) {
  EnvGuard a("NCCL_BUFFSIZE", nullptr), b("NCCL_MIN_NCHANNELS", nullptr),
      c("NCCL_MAX_NCHANNELS", nullptr);
  EXPECT_EQ(comm::nccl_connection_bytes(), 2u * (4u << 20) * 2u);
  setenv("NCCL_BUFFSIZE", "2097152", 1);
  setenv("NCCL_MIN_NCHANNELS", "4", 1);
  EXPECT_EQ(comm::nccl_connection_bytes(), 2u * 2097152u * 4u);
  setenv("NCCL_MAX_NCHANNELS", "1", 1);
  EXPECT_EQ(comm::nccl_connection_bytes(), 2u * 2097152u);
  setenv("NCCL_BUFFSIZE", "4M", 1);
  try {
    comm::nccl_connection_bytes();
    ADD_FAILURE() << "NCCL_BUFFSIZE=4M accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL_BUFFSIZE='4M' is not a positive integer"),
              std::string::npos)
        << e.what();
  }
  // Beyond a long long, and a product beyond a size: refused, not wrapped.
  setenv("NCCL_BUFFSIZE", "99999999999999999999", 1);
  EXPECT_THROW(comm::nccl_connection_bytes(), ConfigError);
  setenv("NCCL_BUFFSIZE", "4611686018427387904", 1);  // 2^62
  setenv("NCCL_MIN_NCHANNELS", "8", 1);
  setenv("NCCL_MAX_NCHANNELS", "8", 1);
  try {
    comm::nccl_connection_bytes();
    ADD_FAILURE() << "an overflowing product accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
}

TEST(CommBuffers, ABudgetWithoutRoomForTheBuffersFailsTheFirstCollective) {
  std::map<std::string, std::string> env = {{"FAULTLINE_COMM_DEVICE_BUFFERS", "1"},
                                            {"FAULTLINE_MEMORY_BUDGET_BYTES", "20000000"}};
  const std::vector<std::string> args = {"--dp", "2", "--steps", "2"};
  auto full = run_train(FAULTLINE_TRAIN, 2, args, 2, env);
  EXPECT_EQ(full.proc.exit_code, exit_code::kCommError) << full.proc.output;
  EXPECT_NE(full.proc.output.find("NCCL WARN Cuda failure 'out of memory' connecting group 'dp'"),
            std::string::npos)
      << full.proc.output;
  EXPECT_NE(full.proc.output.find("ncclUnhandledCudaError: unhandled cuda error"),
            std::string::npos)
      << full.proc.output;
  EXPECT_TRUE(full.steps.empty());
  env["NCCL_BUFFSIZE"] = "2097152";
  auto smaller = run_train(FAULTLINE_TRAIN, 2, args, 2, env);
  EXPECT_EQ(smaller.proc.exit_code, 0) << smaller.proc.output;
  EXPECT_EQ(smaller.steps.size(), 2u);
  // Off (the default), the same budget holds the job: the buffers are not charged.
  env.erase("NCCL_BUFFSIZE");
  env.erase("FAULTLINE_COMM_DEVICE_BUFFERS");
  EXPECT_EQ(run_train(FAULTLINE_TRAIN, 2, args, 2, env).proc.exit_code, 0);
}

// The shared-memory transport's P2P signalling under PCIe ACS (FAULTLINE_SHM_P2P,
// FAULTLINE_PCIE_ACS; shm_transport.hpp): the ready flags a rank writes into its peers' segments
// never reach them, so the first gradient all-reduce waits until its deadline on every rank
// (NVIDIA/nccl#631). NCCL_P2P_DISABLE=1 (the barrier path, which only reads peers' memory)
// trains, and so does P2P without ACS, with the same losses as the barrier path.
TEST(CommBuffers, UnderPcieAcsPeerWrittenReadyFlagsNeverArriveAndTheAllReduceHangs) {
  std::map<std::string, std::string> env = {{"FAULTLINE_SHM_TRANSPORT", "1"},
                                            {"FAULTLINE_SHM_P2P", "1"},
                                            {"FAULTLINE_SHM_BUFFER_BYTES", "16384"},
                                            {"FAULTLINE_COMM_TIMEOUT_MS", "3000"}};
  const std::vector<std::string> args = {"--dp", "4", "--steps", "3"};
  const auto p2p = run_train(FAULTLINE_TRAIN, 4, args, 3, env);
  EXPECT_EQ(p2p.proc.exit_code, 0) << p2p.proc.output;
  ASSERT_EQ(p2p.steps.size(), 3u) << p2p.proc.output;
  env["FAULTLINE_SHM_P2P"] = "0";
  const auto barrier = run_train(FAULTLINE_TRAIN, 4, args, 3, env);
  ASSERT_EQ(barrier.steps.size(), 3u) << barrier.proc.output;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(p2p.steps[i]["loss"], barrier.steps[i]["loss"]) << i;
  env["FAULTLINE_SHM_P2P"] = "1";
  env["FAULTLINE_PCIE_ACS"] = "1";
  const auto acs = run_train(FAULTLINE_TRAIN, 4, args, 3, env);
  EXPECT_EQ(acs.proc.exit_code, exit_code::kCommTimeout) << acs.proc.output;
  EXPECT_TRUE(acs.steps.empty()) << acs.proc.output;
  // No rank gets past the first all-reduce (no step is logged); the launcher stops the job at the
  // first rank's timeout, which on a busy machine can come before the others print theirs.
  EXPECT_NE(acs.proc.output.find("] comm timeout: all_reduce on group 'dp' (seq 0"),
            std::string::npos)
      << acs.proc.output;
  env["NCCL_P2P_DISABLE"] = "1";
  const auto disabled = run_train(FAULTLINE_TRAIN, 4, args, 3, env);
  EXPECT_EQ(disabled.proc.exit_code, 0) << disabled.proc.output;
  EXPECT_EQ(disabled.steps.size(), 3u);
}

}  // namespace
}  // namespace fl::test
