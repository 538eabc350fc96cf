// fl-train's command line: every option once, the scenario-visible ones with their key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/runtime/runtime.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

struct TrainArgs {
  TrainConfig cfg;
  std::string precision = "fp32", metrics_path, auto_resume;
  int64_t samples = 0;  // 0: cfg.num_samples as it is
  std::vector<int64_t> skip_batches;
  int vocab = 0;  // 0: the model's
  model::Structure structure;
  model::MoeConfig moe;
  bool checksum = false, memory_report = false, resume_scan = false;
  int check_layout = 0;  // > 0: --check-layout WORLD, check the layout and model, then exit
};

void declare_train_options(worker::Runtime& rt, TrainArgs& a);
// After parsing: the model with its overrides, the precision, the dataset size, the skips.
void finish_train_options(const worker::Runtime& rt, TrainArgs& a);
// --check-layout WORLD (the harness's `validate`, before any rank starts): the checks every rank
// makes of the layout and the model before building it (model::validate), for a world of `world`
// ranks, without joining one. 0 when they pass; else the error line a rank prints (`faultline
// worker error (config): ...`) on stderr and the workers' usage exit status.
int check_layout(const TrainArgs& a);

}  // namespace fl::train
