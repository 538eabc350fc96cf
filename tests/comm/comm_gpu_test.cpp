// Device-buffer collectives: the MPI backend stages device memory through the host (how several
// ranks share one GPU). Skips cleanly without a device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "kernels/cuda/fill.hpp"
#include "kernels/device.hpp"
#include "workloads/comm/mpi_communicator.hpp"

namespace fl::comm {
namespace {

TEST(DeviceBuffers, MpiAllReduceStagesThroughHost) {
  if (fl::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto world = MpiCommunicator::create_world(mpi_world_rank(), mpi_world_size());
  const size_t n = 1 << 20;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(float)), cudaSuccess);
  cuda::fill_affine(d, n, static_cast<float>(world->rank()), 1.0f);
  world->all_reduce(Buffer{d, n, DType::kF32, Device::kCuda, 0});
  const int s = world->size();
  // sum over ranks of (r + i) = s(s-1)/2 + s*i
  EXPECT_EQ(cuda::count_mismatches(d, n, s * (s - 1) / 2.0f, static_cast<float>(s), 1e-3f * n), 0u);
  cudaFree(d);
}

}  // namespace
}  // namespace fl::comm
