// Cost of a fault site when nothing is armed (budget: <= 1 ns), next to an empty loop body and a
// plain relaxed atomic load as references measured in the same run.
#include <benchmark/benchmark.h>

#include <atomic>

#include "injector/site.hpp"

namespace {

std::atomic<uint32_t> g_flag{0};

void BM_EmptyBody(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) benchmark::DoNotOptimize(x += 1);
}
BENCHMARK(BM_EmptyBody);

void BM_RelaxedLoad(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) {
    if (g_flag.load(std::memory_order_relaxed) != 0) x += 2;
    benchmark::DoNotOptimize(x += 1);
  }
}
BENCHMARK(BM_RelaxedLoad);

void BM_DisarmedFaultSite(benchmark::State& state) {
  fl::fault::remove_handler();
  int x = 0;
  for (auto _ : state) {
    if (FAULTLINE_FAULT_POINT("bench.site", (fl::fault::SiteContext{x, "", "bench", -1, nullptr, 0,
                                                                    fl::DType::kU8, -1})) ==
        fl::fault::Verdict::kSkip) {
      x += 2;
    }
    benchmark::DoNotOptimize(x += 1);
  }
}
BENCHMARK(BM_DisarmedFaultSite);

fl::fault::Verdict never(fl::fault::Site&, fl::fault::SiteContext&) {
  return fl::fault::Verdict::kProceed;
}

void BM_ArmedNotMatchingFaultSite(benchmark::State& state) {
  fl::fault::install_handler(&never);
  int x = 0;
  for (auto _ : state) {
    if (FAULTLINE_FAULT_POINT(
            "bench.site_armed",
            (fl::fault::SiteContext{x, "", "bench", -1, nullptr, 0, fl::DType::kU8, -1})) ==
        fl::fault::Verdict::kSkip) {
      x += 2;
    }
    benchmark::DoNotOptimize(x += 1);
  }
  fl::fault::remove_handler();
}
BENCHMARK(BM_ArmedNotMatchingFaultSite);

}  // namespace
