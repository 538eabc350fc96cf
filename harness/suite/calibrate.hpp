// A reference CPU speed measured in the same window as a suite's runs, so throughput from two
// nights (or two machines) can be compared after dividing by the machine's speed at the time.
#pragma once

#include <chrono>

namespace fl::harness {

// Runs a fixed single-thread 128x128 float GEMM (C += A x B, i-k-j loop, fixed inputs) repeatedly
// for about `budget` (at least one GEMM) and returns the rate in GFLOP/s (2 x 128^3 flops per
// GEMM). Deterministic arithmetic: only the time it takes depends on the machine and its load.
double calibrate_gflops(std::chrono::milliseconds budget = std::chrono::milliseconds(150));

}  // namespace fl::harness
