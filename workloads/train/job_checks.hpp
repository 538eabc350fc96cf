// The job's own settings a rank checks before it allocates anything, and the engine's
// configuration made from them (workloads/train/trainer.cpp builds the Trainer on these).
#pragma once

#include "workloads/model/config.hpp"
#include "workloads/parallel/zero.hpp"
#include "workloads/train/optimizer_wrapper.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

// The engine's configuration from the job's (topology.zero picks the stage; workload.zero and
// workload.ddp the rest); `rank` seeds a --seed-per-rank job's initialisation.
parallel::ZeroConfig zero_config_of(const TrainConfig& c, int stage, int rank);

// The precision, the checkpoint key prefixes, the schedule, the batch and DeepSpeed's batch
// triangle (ConfigError naming the key).
void check_job_config(const TrainConfig& c, const model::Layout& l);

// deepspeed.initialize's optimizer wrapper for the job (optimizer_wrapper.hpp): its data types,
// ZeRO stage, optimizer offload and pipeline; a combination DeepSpeed refuses raises ConfigError.
OptimizerWrapper ds_optimizer_wrapper(const TrainConfig& c, const model::Layout& l);

// The reducers and engines as modelled: torch's DDP wrapper, Gemini's chunks, DeepCompile.
void check_ddp(const TrainConfig& c, const model::Layout& l);

}  // namespace fl::train
