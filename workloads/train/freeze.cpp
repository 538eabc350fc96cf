#include "workloads/train/freeze.hpp"

#include <fnmatch.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "workloads/model/state_dict.hpp"

namespace fl::train {

namespace {
bool matches(const std::vector<std::string>& patterns, const std::string& name) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
    return fnmatch(p.c_str(), name.c_str(), 0) == 0;
  });
}
}  // namespace

std::vector<std::pair<size_t, size_t>> frozen_ranges(const model::ParamLayout& layout,
                                                     const std::vector<std::string>& patterns) {
  std::vector<std::pair<size_t, size_t>> out;
  if (patterns.empty()) return out;
  for (const auto& s : layout.specs()) {
    // By its state-dict name; a tied copy (the last stage's wte) is the parameter it ties to.
    const bool frozen =
        matches(patterns, model::state_dict_key(s.name)) ||
        (!s.init_name.empty() && matches(patterns, model::state_dict_key(s.init_name)));
    if (frozen) out.emplace_back(s.offset, s.offset + s.numel());
  }
  std::sort(out.begin(), out.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& r : out) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<std::string> freeze_patterns(const std::vector<std::string>& patterns,
                                         const model::GptConfig& cfg) {
  std::vector<std::string> out = patterns;
  for (const auto& [alias, original] : model::tied_aliases(cfg)) {
    if (matches(patterns, alias) || matches(patterns, original)) {
      out.push_back(alias);
      out.push_back(original);
    }
  }
  return out;
}

std::optional<std::pair<size_t, std::string>> first_frozen_parameter(
    const std::vector<std::string>& patterns, const model::GptConfig& cfg) {
  const auto all = freeze_patterns(patterns, cfg);
  const auto keys = model::without_aliases(model::gpt_state_dict(cfg, 1), cfg);
  for (size_t id = 0; id < keys.size(); ++id) {
    if (matches(all, keys[id].name)) return std::pair{id, keys[id].name};
  }
  return std::nullopt;
}

void check_freeze(const std::vector<std::string>& patterns, const model::GptConfig& cfg) {
  if (patterns.empty()) return;
  if (cfg.moe.enabled()) {
    raise<ConfigError>(
        "workload.freeze (--freeze) with MoE blocks is not modelled (the experts' engine keeps "
        "its own optimizer); allowed: a dense model");
  }
  const auto keys = model::gpt_state_dict(cfg, 1);
  for (const auto& p : patterns) {
    const bool any = std::any_of(keys.begin(), keys.end(), [&](const model::TensorKey& k) {
      return fnmatch(p.c_str(), k.name.c_str(), 0) == 0;
    });
    if (!any) {
      std::vector<std::string> some;
      for (size_t i = 0; i < keys.size() && i < 4; ++i) some.push_back(keys[i].name);
      raise<ConfigError>(
          "workload.freeze (--freeze) pattern '{}' matches no parameter of the model (fnmatch "
          "over names such as {}, ...)",
          p, fmt::join(some, ", "));
    }
  }
}

std::vector<std::pair<size_t, size_t>> trainable_runs(
    const std::vector<std::pair<size_t, size_t>>& frozen, size_t first, size_t n) {
  std::vector<std::pair<size_t, size_t>> runs;
  size_t at = first;
  const size_t end = first + n;
  for (const auto& [lo, hi] : frozen) {
    if (hi <= at) continue;
    if (lo >= end) break;
    if (lo > at) runs.emplace_back(at - first, lo - first);
    at = std::max(at, hi);
    if (at >= end) break;
  }
  if (at < end) runs.emplace_back(at - first, end - first);
  return runs;
}

}  // namespace fl::train
