// cuBLAS is opened on first use, so CPU ranks never pay for loading it (kernels/cuda/cublas_lazy).
// Runs without a GPU: loading the library and resolving its symbols needs no device.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kernels/cuda/cublas_lazy.hpp"

namespace {

bool mapped(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

// The test binary links the kernels library as every worker does: before any GPU use cuBLAS is
// not in the process; the first use loads it and resolves every entry point.
TEST(CublasLazy, NotMappedUntilTheFirstUseWhichLoadsIt) {
  using namespace fl;
  EXPECT_FALSE(cuda::blas_loaded());
  EXPECT_FALSE(mapped("libcublas")) << "the test binary maps cuBLAS before any GPU use";

  const cuda::BlasApi& api = cuda::blas_api();
  EXPECT_TRUE(cuda::blas_loaded());
  EXPECT_TRUE(mapped("libcublas"));
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.gemm_strided_batched_ex, nullptr);
  EXPECT_STREQ(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
}

}  // namespace
