// What a ZeRO-3 rank's module holds outside and inside a gather, as DeepSpeed has it
// (deepspeed/runtime/zero/partition_parameters.py): after deepspeed.zero.Init every parameter's
// `data` is an empty placeholder (torch.Size([0]); ds_shape and ds_numel keep the full size, the
// rank's shard is ds_tensor), so model.state_dict() lists size-0 tensors and a plain
// model.load_state_dict(full_state_dict) fails on every key with PyTorch's size mismatch.
// GatheredParameters(params, modifier_rank) is the way in: it gathers the full parameters, lets
// the caller change them, and on exit broadcasts them from modifier_rank and re-partitions, so
// only modifier_rank's changes survive (with modifier_rank=None none do).
// Below stage 3 the parameters are whole and the context changes nothing (DeepSpeed's is a no-op
// for parameters that are not ZeRO-3's).
#pragma once

#include <vector>

#include "workloads/model/state_dict.hpp"
#include "workloads/parallel/zero.hpp"

namespace fl::parallel {

// modifier_rank=None: the gathered values are dropped on exit.
inline constexpr int kNoModifier = -1;

// model.state_dict()'s keys and shapes on a rank at ZeRO stage `stage`: the full shapes, or under
// stage 3 outside a gather ("gathered" false) torch.Size([0]) for every parameter.
std::vector<model::TensorKey> module_state_dict(std::vector<model::TensorKey> full, int stage,
                                                bool gathered);

// deepspeed.zero.GatheredParameters(model.parameters(), modifier_rank). Construction gathers
// (collective under stage 3); exit() is the context's __exit__ (collective under stage 3 when
// modifier_rank is set). A context left without exit() (an exception inside it) drops the values.
class GatheredParameters {
 public:
  // `modifier_rank`: a data-parallel rank, or kNoModifier. ConfigError naming `option` when it is
  // not one of them.
  GatheredParameters(ZeroEngine& zero, int stage, int dp, int modifier_rank,
                     const char* option = "modifier_rank");
  // The rank's full parameter vector (ZeroEngine::full_parameters' layout), writable.
  std::vector<float>& full() { return full_; }
  void exit();

 private:
  ZeroEngine& zero_;
  int stage_, modifier_rank_;
  std::vector<float> full_;
  bool open_ = true;
};

}  // namespace fl::parallel
