// The CPU implementations of fl::ops (OpenBLAS GEMMs, plain loops elsewhere).
#pragma once

#include "kernels/ops.hpp"

namespace fl::ops::cpu {
#include "kernels/ops_list.inc"
}  // namespace fl::ops::cpu
