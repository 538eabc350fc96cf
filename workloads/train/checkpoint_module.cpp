// A resume that loads the weights into the module by name, as scripts do with a full state dict
// (docs/workloads.md#zero-3-state-dicts): model.load_state_dict on every rank ("module"), or
// inside deepspeed.zero.GatheredParameters(modifier_rank) on data-parallel rank 0 only
// ("gathered", transformers' _load_state_dict_into_model under ZeRO-3). Under ZeRO-3 the
// module's parameters are size-0 placeholders outside a gather, so the first refuses the
// checkpoint with PyTorch's size mismatch on every key; the second works when modifier_rank is
// the rank that loaded, and silently keeps the old weights otherwise.
#include "kernels/ops.hpp"
#include "workloads/parallel/zero_gathered.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

namespace {

// The checkpoint's keys as the load sees them: the saver's names, `strip` consumed.
std::vector<model::TensorKey> keys_loaded(const std::string& dir, const nlohmann::json& m,
                                          const std::string& strip) {
  auto keys = checkpoint_state_dict(dir, m);
  return strip.empty() ? keys : model::consume_prefix(keys, strip);
}

}  // namespace

void Trainer::load_module(const std::string& dir, const nlohmann::json& m, const NamedLoad& named) {
  const int stage = topo_.layout.zero;
  const bool gathered = cfg_.load_into == "gathered";
  const auto model_keys = model::gpt_state_dict(cfg_.model, topo_.layout.tp);
  const auto loaded = keys_loaded(dir, m, cfg_.strip_key_prefix);
  // model.load_state_dict(sd) outside a gather: the shapes the rank's module has now.
  if (!gathered) {
    model::load_state_dict(parallel::module_state_dict(model_keys, stage, false), loaded,
                           cfg_.load_strict);
  }
  // The optimizer state is the engine's: by name into this rank's partition.
  {
    const size_t offset = zero_->part() * static_cast<size_t>(topo_.dp_rank);
    const bool partitioned = topo_.layout.zero > 0;
    Tensor &exp_avg = zero_->exp_avg(), &exp_avg_sq = zero_->exp_avg_sq();
    ops::HostStage a(exp_avg.f32(), exp_avg.numel()), v(exp_avg_sq.f32(), exp_avg_sq.numel());
    restore_by_name(dir, m, named, layout_, topo_.tp_rank, {nullptr, 0, 0},
                    {a.host(), partitioned ? offset : 0, exp_avg.numel()},
                    {v.host(), partitioned ? offset : 0, exp_avg_sq.numel()});
  }
  // Below ZeRO-3 the context is a no-op: every rank's load stands as made.
  parallel::GatheredParameters ctx(*zero_, stage, topo_.layout.dp, cfg_.modifier_rank,
                                   "workload.checkpoint.modifier_rank (--modifier-rank)");
  if (!gathered || topo_.dp_rank == 0) {
    if (gathered) {
      model::load_state_dict(parallel::module_state_dict(model_keys, stage, true), loaded,
                             cfg_.load_strict);
    }
    restore_by_name(dir, m, named, layout_, topo_.tp_rank,
                    {ctx.full().data(), 0, ctx.full().size()}, {nullptr, 0, 0}, {nullptr, 0, 0});
  }
  ctx.exit();
}

}  // namespace fl::train
