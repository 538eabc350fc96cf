// fl-train --memory-report: every rank's peak memory per category, printed by rank 0.
#pragma once

#include "kernels/memory.hpp"
#include "workloads/comm/communicator.hpp"

namespace fl::train {

// The rank's configured ZeRO transients (ZeroEngine::largest_bucket_bytes, largest_gather_bytes).
struct ZeroTransients {
  size_t bucket = 0, layer = 0;
};

// Collective over `world`: rank 0 prints one line per rank, in bytes:
//   memory rank R: params P grads G optimizer O activations A buffers B gathers X
//   model_states S peak T host H bucket K layer L
// (the peak of each category on the device, the peak of params + grads + optimizer held at once,
// the device's peak and the host accountant's peak, all since the start of the run; the largest
// gradient bucket and the largest group ZeRO-3 gathers, as configured).
void print_memory_report(comm::Communicator& world, const MemoryAccountant& device,
                         const MemoryAccountant& host, ZeroTransients zero = {});

}  // namespace fl::train
