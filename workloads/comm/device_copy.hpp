// Host<->device copies used to stage device buffers through host memory (MPI backend). In a build
// without CUDA, any device buffer is rejected with an error that says so.
#pragma once

#include <cstddef>

#include "workloads/comm/types.hpp"

namespace fl::comm {

void copy_to_host(void* host, const Buffer& src);  // src may be host or device
void copy_from_host(const Buffer& dst, const void* host);
bool cuda_available();  // built with CUDA and a device is present

}  // namespace fl::comm
