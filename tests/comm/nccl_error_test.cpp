// The text of a failed NCCL call: the result's name and NCCL's description, then the reason NCCL
// recorded (ncclGetLastError), which NCCL prints itself only with NCCL_DEBUG=WARN. The formatting
// on every machine; with NCCL in the build, a real failed init (no GPU needed: without one NCCL
// fails on the CUDA runtime, with one on the invalid rank) checked for NCCL's own reason.
#include <gtest/gtest.h>

#include "workloads/comm/nccl_error.hpp"

#if defined(FAULTLINE_HAVE_NCCL)
#include <nccl.h>
#endif

namespace fl::comm {
namespace {

TEST(NcclError, NamesTheResultAndCarriesNcclsReason) {
  EXPECT_EQ(format_nccl_error(5, "invalid usage (run with NCCL_DEBUG=WARN for details)",
                              "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60\n",
                              "2.28.9"),
            "ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version "
            "2.28.9; last NCCL error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA "
            "device 60");
}

TEST(NcclError, WithoutARecordedReasonTheDescriptionStandsAlone) {
  EXPECT_EQ(format_nccl_error(6, "remote process exited or there was a network error", " \n", ""),
            "ncclRemoteError: remote process exited or there was a network error");
}

TEST(NcclError, EveryResultCodeHasItsName) {
  EXPECT_EQ(nccl_result_name(0), "ncclSuccess");
  EXPECT_EQ(nccl_result_name(1), "ncclUnhandledCudaError");
  EXPECT_EQ(nccl_result_name(2), "ncclSystemError");
  EXPECT_EQ(nccl_result_name(3), "ncclInternalError");
  EXPECT_EQ(nccl_result_name(4), "ncclInvalidArgument");
  EXPECT_EQ(nccl_result_name(7), "ncclInProgress");
  EXPECT_EQ(nccl_result_name(42), "ncclResult 42");
  EXPECT_EQ(nccl_result_name(-1), "ncclResult -1");
}

#if defined(FAULTLINE_HAVE_NCCL)
// An init that fails before it has a communicator (comm stays null) still reports NCCL's reason.
TEST(NcclError, AFailedInitWithoutACommunicatorCarriesNcclsReason) {
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, 2, id, 5);  // rank 5 of 2
  ASSERT_NE(r, ncclSuccess);
  EXPECT_EQ(comm, nullptr);
  const std::string last = ncclGetLastError(nullptr);
  ASSERT_FALSE(last.empty()) << "NCCL recorded no reason for " << ncclGetErrorString(r);
  const std::string text = nccl_error_text(r, nullptr);
  EXPECT_EQ(text.rfind(nccl_result_name(r) + ": " + ncclGetErrorString(r) + ", NCCL version 2.", 0),
            0u)
      << text;
  EXPECT_NE(text.find("; last NCCL error: " + last), std::string::npos) << text;
}
#endif

}  // namespace
}  // namespace fl::comm
