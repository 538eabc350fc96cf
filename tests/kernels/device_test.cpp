// Device selection and CUDA error reporting that run on any machine: parsing device names, what
// a CUDA device request does where there is none, and the text of CUDA errors.
#include <gtest/gtest.h>

#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"
#if defined(FAULTLINE_HAVE_CUDA)
#include "kernels/cuda/runtime.hpp"
#endif

namespace fl {
namespace {

TEST(Device, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_device("cpu", 3), Device::cpu());
  EXPECT_EQ(parse_device("cuda", 3), Device::cuda(3));
  EXPECT_EQ(parse_device("cuda:1", 0), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"}) {
    try {
      parse_device(bad, 0);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("(allowed: cpu, cuda, cuda:N)"), std::string::npos);
    }
  }
}

TEST(Device, CpuIsTheDefaultAndTensorsLiveThere) {
  EXPECT_EQ(current_device(), Device::cpu());
  MemoryAccountant acct(0, 0);
  Tensor t = Tensor::zeros({4}, DType::kF32, "t", acct);
  EXPECT_EQ(t.device(), Device::cpu());
}

TEST(Device, CudaWithoutADeviceIsADeviceErrorNamingTheRank) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  try {
    set_current_device(Device::cuda(0));
    FAIL() << "binding cuda:0 succeeded without a device";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    if (built_with_cuda()) {
      EXPECT_NE(msg.find("cuda:0 requested but no CUDA device is visible (cudaGetDeviceCount: "),
                std::string::npos)
          << msg;
    } else {
      EXPECT_NE(msg.find("this build has no CUDA"), std::string::npos) << msg;
    }
    EXPECT_EQ(msg.rfind("[rank ", 0), 0u) << msg;
  }
  EXPECT_EQ(current_device(), Device::cpu());  // unchanged after the failure
}

#if defined(FAULTLINE_HAVE_CUDA)
TEST(CudaErrors, MessageNamesRankDeviceOpAndError) {
  const std::string msg = cuda::error_message(cudaErrorMemoryAllocation, "cudaMalloc", 3, 1);
  EXPECT_EQ(msg, std::string("[rank 3] CUDA error on cuda:1 in cudaMalloc: "
                             "cudaErrorMemoryAllocation (") +
                     cudaGetErrorString(cudaErrorMemoryAllocation) + ")");
  EXPECT_FALSE(cuda::is_sticky(cudaErrorMemoryAllocation));
}

TEST(CudaErrors, StickyErrorsSayTheRankEnds) {
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert,
                        cudaErrorMisalignedAddress, cudaErrorIllegalInstruction}) {
    EXPECT_TRUE(cuda::is_sticky(e)) << cudaGetErrorName(e);
    const std::string msg = cuda::error_message(e, "kernel launch of gelu_forward", 0, 0);
    EXPECT_NE(msg.find(cudaGetErrorName(e)), std::string::npos);
    EXPECT_NE(msg.find("this error is sticky: the CUDA context of the process is unusable and "
                       "the rank ends"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("CUDA_LAUNCH_BLOCKING=1"), std::string::npos);
  }
  for (cudaError_t e : {cudaErrorInvalidValue, cudaErrorInvalidDevice, cudaErrorNoDevice}) {
    EXPECT_FALSE(cuda::is_sticky(e)) << cudaGetErrorName(e);
  }
}
#endif

}  // namespace
}  // namespace fl
