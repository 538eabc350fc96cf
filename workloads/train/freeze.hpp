// workload.freeze (docs/workloads.md#frozen-parameters): parameters whose requires_grad is
// False, named by fnmatch patterns over their state-dict names ("blocks.0.*", "wte.weight"). A
// frozen parameter gets no gradient (its gradient is zeroed as the backward produces it, so the
// reduction, the overflow check and the norm see nothing of it) and is not in the optimizer
// (neither updated nor decayed). A rank whose every parameter is frozen has an empty optimizer
// parameter list, which torch.optim refuses.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"

namespace fl::train {

// Flat [lo, hi) ranges of `layout` whose parameter names match one of `patterns`, sorted and
// merged.
std::vector<std::pair<size_t, size_t>> frozen_ranges(const model::ParamLayout& layout,
                                                     const std::vector<std::string>& patterns);

// `patterns` with, for each tied pair (model::tied_aliases: lm_head.weight is wte.weight), both
// names when a pattern matches either: freezing one name of a tied tensor freezes the tensor,
// on every stage that holds a copy, so the copies cannot drift apart.
std::vector<std::string> freeze_patterns(const std::vector<std::string>& patterns,
                                         const model::GptConfig& cfg);

// The first parameter `patterns` freeze (freeze_patterns applied) in model.parameters() order,
// which zero.Init numbers as ds_id: {ds_id, state-dict name}; nullopt when none is frozen.
std::optional<std::pair<size_t, std::string>> first_frozen_parameter(
    const std::vector<std::string>& patterns, const model::GptConfig& cfg);

// ConfigError naming the pattern when one matches no parameter of the whole model (names as
// model::gpt_state_dict gives them), or when the model has MoE blocks (not modelled).
void check_freeze(const std::vector<std::string>& patterns, const model::GptConfig& cfg);

// Elements of [first, first + n) outside `frozen`, as [lo, hi) offsets from `first`.
std::vector<std::pair<size_t, size_t>> trainable_runs(
    const std::vector<std::pair<size_t, size_t>>& frozen, size_t first, size_t n);

}  // namespace fl::train
