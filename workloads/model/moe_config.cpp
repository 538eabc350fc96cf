// The MoE options' checks, in DeepSpeed's words where it has them (deepspeed/moe/layer.py,
// deepspeed/utils/groups.py), followed by the option and what is allowed here.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "workloads/model/config.hpp"

namespace fl::model {

namespace {

// The EP sizes that divide both the experts and the data-parallel size.
std::vector<int> ep_sizes_allowed(int experts, int dp) {
  std::vector<int> out;
  for (int d = 1; d <= dp; ++d) {
    if (dp % d == 0 && experts % d == 0) out.push_back(d);
  }
  return out;
}

void validate_routing(const MoeConfig& e) {
  if (e.top_k != 1 && e.top_k != 2) {
    raise<ConfigError>(
        "workload.moe.top_k is {}: allowed is 1 or 2 (top-1 and top-2 gating, DeepSpeed's "
        "top1gating and top2gating)",
        e.top_k);
  }
  if (e.top_k > e.experts) {
    raise<ConfigError>("workload.moe.top_k is {} but there are {} experts: allowed is 1 to {}",
                       e.top_k, e.experts, e.experts);
  }
  if (!(e.capacity_factor > 0)) {
    raise<ConfigError>(
        "workload.moe.capacity_factor is {}: allowed is a positive number (DeepSpeed's default "
        "is 1.0)",
        e.capacity_factor);
  }
  if (e.min_capacity < 0) {
    raise<ConfigError>("workload.moe.min_capacity is {}: allowed is 0 or more", e.min_capacity);
  }
  if (e.aux_loss_coef < 0) {
    raise<ConfigError>("workload.moe.aux_loss_coef is {}: allowed is 0 or more", e.aux_loss_coef);
  }
}

}  // namespace

void validate_moe(const GptConfig& m, const Layout& l) {
  const MoeConfig& e = m.moe;
  if (e.experts < 0) {
    raise<ConfigError>(
        "workload.moe.experts is {}: allowed is 0 (every block dense) or a positive number of "
        "experts",
        e.experts);
  }
  if (e.experts == 0) {
    if (e.ep_size != 1) {
      raise<ConfigError>(
          "workload.moe.ep_size is {} but workload.moe.experts is 0: expert parallelism needs "
          "experts (allowed: ep_size 1 without them)",
          e.ep_size);
    }
    return;
  }
  if (e.ep_size < 1) {
    raise<ConfigError>("workload.moe.ep_size is {}: allowed is a positive divisor of dp {}",
                       e.ep_size, l.dp);
  }
  if (e.experts % e.ep_size != 0) {
    raise<ConfigError>(
        "Number of experts ({}) should be divisible by expert parallel size ({}) "
        "(workload.moe.ep_size allowed for {} experts at dp {}: {})",
        e.experts, e.ep_size, e.experts, l.dp, fmt::join(ep_sizes_allowed(e.experts, l.dp), ", "));
  }
  if (l.dp % e.ep_size != 0) {
    // groups._create_expert_and_data_parallel: _ensure_divisibility(world_size, ep_size).
    raise<ConfigError>(
        "{} is not divisible by {} (workload.moe.ep_size {} must divide the data-parallel size "
        "{}; allowed for {} experts: {})",
        l.dp, e.ep_size, e.ep_size, l.dp, e.experts,
        fmt::join(ep_sizes_allowed(e.experts, l.dp), ", "));
  }
  validate_routing(e);
  if (e.interval < 1 || e.interval > m.layers) {
    raise<ConfigError>(
        "workload.moe.interval is {}: allowed is 1 to {} (blocks whose 1-based number is a "
        "multiple of it are MoE; the model has {} blocks)",
        e.interval, m.layers, m.layers);
  }
  if (e.dropless && e.ep_size != 1) {
    raise<ConfigError>(
        "workload.moe.dropless (Mixtral's sparse block) keeps every expert on every rank: "
        "allowed ep_size is 1, not {}",
        e.ep_size);
  }
  if (l.tp != 1 || l.pp != 1) {
    raise<ConfigError>(
        "workload.moe with topology.tp {} and pp {}: the MoE block runs with tensor- and "
        "pipeline-parallel size 1 only (allowed: tp 1, pp 1)",
        l.tp, l.pp);
  }
}

}  // namespace fl::model
