// ZeRO-3 placeholders and the gathered-parameters context (zero_gathered.hpp).
#include "workloads/parallel/zero_gathered.hpp"

#include "base/error.hpp"

namespace fl::parallel {

std::vector<model::TensorKey> module_state_dict(std::vector<model::TensorKey> full, int stage,
                                                bool gathered) {
  // partition_parameters.py: param.data = torch.empty(0, dtype=..., device=...) once partitioned.
  if (stage == 3 && !gathered) {
    for (auto& k : full) k.shape = {0};
  }
  return full;
}

GatheredParameters::GatheredParameters(ZeroEngine& zero, int stage, int dp, int modifier_rank,
                                       const char* option)
    : zero_(zero), stage_(stage), modifier_rank_(modifier_rank) {
  if (modifier_rank != kNoModifier && (modifier_rank < 0 || modifier_rank >= dp)) {
    raise<ConfigError>("{} is {} (allowed: {} for None, or a data-parallel rank 0..{})", option,
                       modifier_rank, kNoModifier, dp - 1);
  }
  full_ = zero_.full_parameters();
}

void GatheredParameters::exit() {
  if (!open_) return;
  open_ = false;
  if (stage_ < 3) {
    // Not ZeRO-3 parameters: the context is a no-op and each rank's changes stand as made.
    zero_.set_full_parameters(full_, -1);
    return;
  }
  // __exit__: with a modifier_rank the gathered values are broadcast from it and re-partitioned
  // (has_been_updated=True); with None each rank's partition keeps what it held.
  if (modifier_rank_ != kNoModifier) zero_.set_full_parameters(full_, modifier_rank_);
}

}  // namespace fl::parallel
