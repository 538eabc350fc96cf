// GEMM throughput of the training step's shapes: ops::linear_forward / linear_backward (what the
// model calls) against a direct cblas_sgemm of the same shape, in the same run. Shapes are the
// tiny and small configs' linears at micro-batch 8 (N = 8 × seq_len tokens).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <vector>

#include "kernels/ops.hpp"

namespace {

struct Shape {
  const char* name;
  int N, C, OC;
};

// tiny: C 32, T 16; small: C 128, T 64; both at micro-batch 8.
const Shape kShapes[] = {
    {"tiny.qkv", 128, 32, 96},       {"tiny.fc", 128, 32, 128},
    {"tiny.fcproj", 128, 128, 32},   {"tiny.lm_head", 128, 32, 64},
    {"small.qkv", 512, 128, 384},    {"small.fc", 512, 128, 512},
    {"small.fcproj", 512, 512, 128}, {"small.lm_head", 512, 128, 256},
};

std::vector<float> randv(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void set_flops(benchmark::State& state, const Shape& s, double gemms) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * s.N * s.C * s.OC * gemms * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_LinearForward(benchmark::State& state, Shape s) {
  auto in = randv(static_cast<size_t>(s.N) * s.C), w = randv(static_cast<size_t>(s.OC) * s.C),
       b = randv(static_cast<size_t>(s.OC));
  std::vector<float> out(static_cast<size_t>(s.N) * s.OC);
  for (auto _ : state) {
    fl::ops::linear_forward(out.data(), in.data(), w.data(), b.data(), s.N, s.C, s.OC);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, s, 1);
}

void BM_CblasForward(benchmark::State& state, Shape s) {
  auto in = randv(static_cast<size_t>(s.N) * s.C), w = randv(static_cast<size_t>(s.OC) * s.C);
  std::vector<float> out(static_cast<size_t>(s.N) * s.OC);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.N, s.OC, s.C, 1.0f, in.data(), s.C,
                w.data(), s.C, 0.0f, out.data(), s.OC);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, s, 1);
}

void BM_LinearBackward(benchmark::State& state, Shape s) {
  auto in = randv(static_cast<size_t>(s.N) * s.C), w = randv(static_cast<size_t>(s.OC) * s.C),
       dout = randv(static_cast<size_t>(s.N) * s.OC);
  std::vector<float> din(in.size()), dw(w.size()), db(static_cast<size_t>(s.OC));
  for (auto _ : state) {
    fl::ops::linear_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(),
                             s.N, s.C, s.OC);
    benchmark::DoNotOptimize(din.data());
  }
  set_flops(state, s, 2);
}

void BM_CblasBackward(benchmark::State& state, Shape s) {
  auto in = randv(static_cast<size_t>(s.N) * s.C), w = randv(static_cast<size_t>(s.OC) * s.C),
       dout = randv(static_cast<size_t>(s.N) * s.OC);
  std::vector<float> din(in.size()), dw(w.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.N, s.C, s.OC, 1.0f, dout.data(), s.OC,
                w.data(), s.C, 1.0f, din.data(), s.C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, s.C, s.N, 1.0f, dout.data(), s.OC,
                in.data(), s.C, 1.0f, dw.data(), s.C);
    benchmark::DoNotOptimize(din.data());
  }
  set_flops(state, s, 2);
}

const int kRegistered = [] {
  for (const auto& s : kShapes) {
    benchmark::RegisterBenchmark((std::string("linear_fwd/") + s.name).c_str(), BM_LinearForward,
                                 s);
    benchmark::RegisterBenchmark((std::string("cblas_fwd/") + s.name).c_str(), BM_CblasForward, s);
    benchmark::RegisterBenchmark((std::string("linear_bwd/") + s.name).c_str(), BM_LinearBackward,
                                 s);
    benchmark::RegisterBenchmark((std::string("cblas_bwd/") + s.name).c_str(), BM_CblasBackward, s);
  }
  return 0;
}();

}  // namespace
