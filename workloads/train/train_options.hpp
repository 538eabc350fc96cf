// fl-train's command line: every option once, the scenario-visible ones with their key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/runtime/runtime.hpp"
#include "workloads/train/tokenizer.hpp"
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
  TokenizerOptions tokenizer;
  bool checksum = false, memory_report = false, resume_scan = false;
};

void declare_train_options(worker::Runtime& rt, TrainArgs& a);
// After parsing: the model with its overrides, the precision, the dataset size, the skips.
void finish_train_options(const worker::Runtime& rt, TrainArgs& a);

}  // namespace fl::train
