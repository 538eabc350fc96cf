// Pipeline schedules (GPipe, 1F1B) over one pipeline stage: activations travel forward to
// pp_rank+1, their gradients backward to pp_rank-1, one micro-batch at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "workloads/model/gpt.hpp"
#include "workloads/parallel/topology.hpp"

namespace fl::parallel {

struct PipelineMicroBatch {
  const int32_t* tokens = nullptr;   // [B*T]
  const int32_t* targets = nullptr;  // [B*T]
  int B = 0;
};

// Runs `mbs` through this stage with `schedule` ("1f1b" or "gpipe"; forward-only runs GPipe's
// forwards), backward when `backward` with d(objective)/d(mean loss) = dloss. Activations and
// received tensors are charged to `acct`. Returns the sum of the micro-batch losses on the last
// stage (0 elsewhere). `before_backward`, when set, runs before each backward on a stage that is
// not the last (where DeepSpeed's pipeline engine calls its optimizer's clear_lp_grads).
double run_pipeline(model::GptStage& stage, model::ParamAccess& params, Topology& topo,
                    const std::vector<PipelineMicroBatch>& mbs, int T, float dloss, bool backward,
                    const std::string& schedule, MemoryAccountant& acct,
                    const std::function<void()>& before_backward = {});

}  // namespace fl::parallel
