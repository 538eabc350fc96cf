// Device-side buffer initialisation and checking for tests of device-buffer collectives.
#pragma once

#include <cstddef>

namespace fl::cuda {

// dst[i] = base + scale * i, on the current device.
void fill_affine(float* dst, size_t n, float base, float scale);
// Number of i where |src[i] - (base + scale*i)| > tol.
size_t count_mismatches(const float* src, size_t n, float base, float scale, float tol);
// Queues a kernel that stores through `p` (tests pass an invalid address to raise a sticky
// cudaErrorIllegalAddress); returns without waiting.
void store_through(float* p);

}  // namespace fl::cuda
