// Checkpoints as named state dicts: the manifest lists every key (as the saver named it) with its
// shape, and a load matches them by name against the model as torch.nn.Module.load_state_dict
// does, after an optional consume_prefix_in_state_dict_if_present. A load that is not strict
// copies the tensors that match by name, whatever the checkpoint's layer count.
#include <algorithm>

#include <fmt/format.h>

#include "workloads/train/checkpoint.hpp"

namespace fl::train {

namespace {

// The name a checkpoint key has once `strip` is consumed.
std::string loaded_name(const std::string& key, const std::string& strip) {
  return !strip.empty() && key.rfind(strip, 0) == 0 ? key.substr(strip.size()) : key;
}

int tp_of(const nlohmann::json& m) {
  return m.contains("layout") ? m.at("layout").value("tp", 1) : 1;
}

// The checkpoint model's own keys in the order its manifest lists them: all of them, or (a save
// without aliases) those less the aliases, whichever has the manifest's count.
std::vector<model::TensorKey> own_keys(const nlohmann::json& m, size_t listed) {
  const auto cfg = model_from_manifest(m);
  auto own = model::gpt_state_dict(cfg, tp_of(m));
  if (own.size() != listed) {
    auto fewer = model::without_aliases(own, cfg);
    if (fewer.size() == listed) return fewer;
  }
  return own;
}

}  // namespace

nlohmann::json model_json(const model::GptConfig& cfg) {
  const auto& s = cfg.structure;
  return {{"vocab", cfg.vocab},
          {"d_model", cfg.d_model},
          {"layers", cfg.layers},
          {"heads", cfg.heads},
          {"seq_len", cfg.seq_len},
          {"seed", cfg.seed},
          {"structure",
           {{"tie_embeddings", s.tie_embeddings},
            {"vocab_parallel", s.vocab_parallel},
            {"make_vocab_size_divisible_by", s.divisible_by},
            {"padded_vocab", s.padded_vocab},
            {"parallel_output", s.parallel_output}}}};
}

model::GptConfig model_from_manifest(const nlohmann::json& m) {
  const auto& j = m.at("model");
  model::GptConfig cfg{j.at("vocab").get<int>(),   j.at("d_model").get<int>(),
                       j.at("layers").get<int>(),  j.at("heads").get<int>(),
                       j.at("seq_len").get<int>(), j.at("seed").get<uint64_t>(),
                       {}};
  if (j.contains("structure")) {
    const auto& s = j.at("structure");
    auto& out = cfg.structure;
    out.tie_embeddings = s.value("tie_embeddings", out.tie_embeddings);
    out.vocab_parallel = s.value("vocab_parallel", out.vocab_parallel);
    out.divisible_by = s.value("make_vocab_size_divisible_by", out.divisible_by);
    out.padded_vocab = s.value("padded_vocab", out.padded_vocab);
    out.parallel_output = s.value("parallel_output", out.parallel_output);
  }
  return cfg;
}

nlohmann::json state_dict_json(const model::GptConfig& cfg, int tp, const std::string& prefix,
                               bool aliases) {
  nlohmann::json out = nlohmann::json::array();
  auto keys = model::gpt_state_dict(cfg, tp);
  if (!aliases) keys = model::without_aliases(keys, cfg);
  for (auto& k : keys) out.push_back({{"name", prefix + k.name}, {"shape", k.shape}});
  return out;
}

std::vector<model::TensorKey> checkpoint_state_dict(const std::string& dir,
                                                    const nlohmann::json& m) {
  if (!m.contains("state_dict")) return model::gpt_state_dict(model_from_manifest(m), tp_of(m));
  std::vector<model::TensorKey> out;
  for (auto& e : m.at("state_dict")) {
    out.push_back({e.at("name").get<std::string>(), e.at("shape").get<std::vector<int64_t>>()});
  }
  const auto own = own_keys(m, out.size());
  // Key i is the model's tensor i under the saver's name: the same count and shapes.
  bool same = out.size() == own.size();
  for (size_t i = 0; same && i < out.size(); ++i) same = out[i].shape == own[i].shape;
  if (!same) {
    raise<CheckpointError>(
        "checkpoint {}: the manifest's state_dict lists {} tensors that are not those of its "
        "model ({} tensors for {} layers, d_model {}, vocab {})",
        dir, out.size(), own.size(), m.at("model").at("layers").get<int>(),
        m.at("model").at("d_model").get<int>(), m.at("model").at("vocab").get<int>());
  }
  return out;
}

NamedLoad load_named(const std::string& dir, const nlohmann::json& m, const model::GptConfig& cfg,
                     int tp, const std::string& strip, bool strict,
                     const std::string& strip_option) {
  const auto stored = checkpoint_state_dict(dir, m);
  std::vector<model::TensorKey> loaded = stored;
  if (!strip.empty()) {
    const bool any = std::any_of(stored.begin(), stored.end(),
                                 [&](auto& k) { return k.name.rfind(strip, 0) == 0; });
    if (!any) {
      raise<ConfigError>(
          "{} is '{}' but no key of checkpoint {} starts with it (its first key is '{}'); "
          "allowed: empty, or a prefix its keys have",
          strip_option, strip, dir, stored.empty() ? "" : stored.front().name);
    }
    loaded = model::consume_prefix(stored, strip);
  }
  NamedLoad out{model::load_state_dict(model::gpt_state_dict(cfg, tp), loaded, strict), {}};
  const auto own = own_keys(m, stored.size());
  // As in the dict: a renamed key replaces an unprefixed one of the same name.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < stored.size(); ++i) {
      const std::string name = loaded_name(stored[i].name, strip);
      if ((name != stored[i].name) == (pass == 1)) out.source[name] = own[i].name;
    }
  }
  for (auto& k : out.keys.missing) out.source.erase(k);
  return out;
}

void restore_by_name(const std::string& dir, const nlohmann::json& m, const NamedLoad& load,
                     const model::ParamLayout& layout, int tp_rank, const NamedSlice& params,
                     const NamedSlice& exp_avg, const NamedSlice& exp_avg_sq) {
  const auto ckpt = model_from_manifest(m);
  const int tp = m.at("layout").at("tp"), pp = m.at("layout").at("pp");
  // Every stage of this TP rank: a block may sit in another stage when the layer counts differ.
  std::vector<model::ParamLayout> layouts;
  std::vector<ModelShardState> states;
  std::map<std::string, std::pair<size_t, const model::ParamSpec*>> where;
  layouts.reserve(static_cast<size_t>(pp));
  for (int p = 0; p < pp; ++p) {
    layouts.emplace_back(ckpt, tp, tp_rank, pp, p);
    states.push_back(reassemble_model_shard(dir, m, tp_rank, p, layouts.back().total()));
  }
  for (size_t p = 0; p < layouts.size(); ++p) {
    for (auto& s : layouts[p].specs()) where[model::state_dict_key(s.name)] = {p, &s};
  }
  // A tied checkpoint's alias reads the tensor it names.
  for (auto& [alias, original] : model::tied_aliases(ckpt)) {
    if (!where.count(alias)) where[alias] = where.at(original);
  }
  for (auto& s : layout.specs()) {
    auto src = load.source.find(model::state_dict_key(s.name));
    // One tensor under two keys: load_state_dict copies wte.weight, then lm_head.weight into the
    // same storage, so the alias's values are the ones it keeps.
    if (s.name == "wte" && layout.head_reads_embedding() && load.source.count("lm_head.weight")) {
      src = load.source.find("lm_head.weight");
    }
    if (src == load.source.end()) continue;
    const auto [p, from] = where.at(src->second);
    if (from->numel() != s.numel()) {
      raise<CheckpointError>("checkpoint {}: {} holds {} elements on tp rank {}, this model {}",
                             dir, src->second, from->numel(), tp_rank, s.numel());
    }
    auto copy = [&](const NamedSlice& to, const std::vector<float>& v) {
      const size_t begin = std::max(to.lo, s.offset),
                   end = std::min(to.lo + to.count, s.offset + s.numel());
      for (size_t i = begin; i < end; ++i) to.data[i - to.lo] = v[from->offset + (i - s.offset)];
    };
    copy(params, states[p].params);
    copy(exp_avg, states[p].exp_avg);
    copy(exp_avg_sq, states[p].exp_avg_sq);
  }
}

}  // namespace fl::train
