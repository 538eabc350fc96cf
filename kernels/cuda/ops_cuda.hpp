// The CUDA implementations of fl::ops: cuBLAS GEMMs (fp32, no TF32) and the kernels of
// kernels/cuda/kernels.cu, all queued on the device's compute stream. Pointers are device memory.
#pragma once

#include "kernels/ops.hpp"

namespace fl::ops::cuda {
#include "kernels/ops_list.inc"
}  // namespace fl::ops::cuda
