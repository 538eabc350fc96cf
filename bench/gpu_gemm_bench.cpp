// GEMM throughput on a GPU: the training step's linear layers through ops::linear_forward /
// linear_backward (what the model calls, cuBLAS fp32 underneath) against the card's cuBLAS fp32
// peak on a large square SGEMM, in the same run. Timed with CUDA events (manual time), so the
// numbers are device time, not launch time. Shapes: the GPT-2-sized benchmark config of
// bench/gpu_vs_pytorch.sh (d_model 768, seq 256, micro-batch 8: N = 2048 tokens) and the small
// config (d_model 128, seq 64, micro-batch 8: N = 512). Without a device every case skips.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "kernels/cuda/runtime.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"

namespace {

using fl::Device;
using fl::DeviceGuard;
using fl::DType;
using fl::MemoryAccountant;
using fl::Tensor;

struct Shape {
  const char* name;
  int N, C, OC;
};

const Shape kShapes[] = {
    {"gpt2.qkv", 2048, 768, 2304},     {"gpt2.attn_proj", 2048, 768, 768},
    {"gpt2.fc", 2048, 768, 3072},      {"gpt2.fcproj", 2048, 3072, 768},
    {"gpt2.lm_head", 2048, 768, 8192}, {"small.qkv", 512, 128, 384},
    {"small.fc", 512, 128, 512},       {"small.fcproj", 512, 512, 128},
};

Tensor device_randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.1f);
  std::vector<float> h(n);
  for (auto& x : h) x = d(rng);
  Tensor t =
      Tensor::zeros({static_cast<int64_t>(n)}, DType::kF32, "bench", MemoryAccountant::cuda(0));
  fl::ops::from_host(t.raw(), h.data(), n * sizeof(float));
  return t;
}

// Times `body` with CUDA events around each iteration.
template <class F>
void timed(benchmark::State& state, double flops_per_iter, F&& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();  // warm-up (cuBLAS heuristics, allocator)
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(start);
    body();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops_per_iter * state.iterations() / 1e12, benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

bool have_gpu(benchmark::State& state) {
  if (fl::cuda_device_count() > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

void BM_CublasSquarePeak(benchmark::State& state) {
  if (!have_gpu(state)) return;
  DeviceGuard g(Device::cuda(0));
  const int n = static_cast<int>(state.range(0));
  Tensor a = device_randn(size_t(n) * n, 1), b = device_randn(size_t(n) * n, 2),
         c = device_randn(size_t(n) * n, 3);
  const float one = 1.0f, zero = 0.0f;
  timed(state, 2.0 * n * n * n, [&] {
    fl::cuda::blas_api().sgemm(fl::cuda::blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.f32(),
                               n, b.f32(), n, &zero, c.f32(), n);
  });
}
BENCHMARK(BM_CublasSquarePeak)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_StepLinear(benchmark::State& state, Shape s) {
  if (!have_gpu(state)) return;
  DeviceGuard g(Device::cuda(0));
  const size_t in_n = size_t(s.N) * s.C, w_n = size_t(s.OC) * s.C, out_n = size_t(s.N) * s.OC;
  Tensor in = device_randn(in_n, 4), w = device_randn(w_n, 5), b = device_randn(s.OC, 6),
         out = device_randn(out_n, 7), dout = device_randn(out_n, 8), din = device_randn(in_n, 9),
         dw = device_randn(w_n, 10), db = device_randn(s.OC, 11);
  // Forward (1 GEMM) and backward (2 GEMMs), as one training step runs each linear.
  timed(state, 3 * 2.0 * s.N * s.C * s.OC, [&] {
    fl::ops::linear_forward(out.f32(), in.f32(), w.f32(), b.f32(), s.N, s.C, s.OC);
    fl::ops::linear_backward(din.f32(), dw.f32(), db.f32(), dout.f32(), in.f32(), w.f32(), s.N, s.C,
                             s.OC);
  });
}

int register_shapes() {
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark((std::string("BM_StepLinear/") + s.name).c_str(), BM_StepLinear, s)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return 0;
}
const int registered = register_shapes();

}  // namespace
