// torch.distributed's default process group as the project's helpers see it: the worker runtime
// registers its world communicator once the world has formed, and code that runs both inside a
// job and in a single-process tool (fl-ckpt's conversions, as Megatron's tools/checkpoint and
// DeepSpeed's zero_to_fp32.py run without init_process_group) asks for the rank through here.
// Asking for it when no group exists is PyTorch's error (ValueError: "Default process group has
// not been initialized, please make sure to call init_process_group."); the helpers' no-group
// path answers as a world of one, as `dist.get_rank() if dist.is_initialized() else 0` does.
#pragma once

#include "workloads/comm/errors.hpp"

namespace fl::comm {

class Communicator;

// Registered by the worker runtime for the length of the job (nullptr clears it).
void set_default_group(Communicator* world);
// dist.is_initialized().
bool default_group_initialized();
// dist.get_rank() / dist.get_world_size(): CommError with PyTorch's words when no group exists.
int default_group_rank();
int default_group_size();
// The no-group path: rank 0 of a world of 1 when no group exists.
int rank_or_zero();
int world_size_or_one();

}  // namespace fl::comm
