// Checkpoints as named state dicts: the manifest lists every key (as the saver named it) with its
// shape, and a load matches them by name against the model as torch.nn.Module.load_state_dict
// does, after an optional consume_prefix_in_state_dict_if_present. A load that is not strict
// copies the tensors that match by name, whatever the checkpoint's layer count.
#include <algorithm>
#include <map>
#include <optional>

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

// wte and lm_head with the vocabulary's own rows (a save that strips the padding).
void unpad(std::vector<model::TensorKey>& keys, const model::GptConfig& cfg) {
  for (auto& k : keys) {
    if (k.name == "wte.weight" || k.name == "lm_head.weight") k.shape[0] = cfg.vocab;
  }
}

// The checkpoint model's own keys in the order its manifest lists them: all of them, or (a save
// without aliases) those less the aliases, whichever has the manifest's count; unpadded when the
// save stripped the padding.
std::vector<model::TensorKey> own_keys(const nlohmann::json& m, size_t listed) {
  const auto cfg = model_from_manifest(m);
  auto own = model::gpt_state_dict(cfg, tp_of(m));
  if (m.value("state_dict_unpadded", false)) unpad(own, cfg);
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

model::Structure structure_from_manifest(const nlohmann::json& m) {
  model::Structure out;
  const auto& j = m.at("model");
  if (!j.contains("structure")) return out;
  const auto& s = j.at("structure");
  out.tie_embeddings = s.value("tie_embeddings", out.tie_embeddings);
  out.vocab_parallel = s.value("vocab_parallel", out.vocab_parallel);
  out.divisible_by = s.value("make_vocab_size_divisible_by", out.divisible_by);
  out.padded_vocab = s.value("padded_vocab", out.padded_vocab);
  out.parallel_output = s.value("parallel_output", out.parallel_output);
  return out;
}

model::GptConfig model_from_manifest(const nlohmann::json& m) {
  const auto& j = m.at("model");
  return {j.at("vocab").get<int>(),  j.at("d_model").get<int>(), j.at("layers").get<int>(),
          j.at("heads").get<int>(),  j.at("seq_len").get<int>(), j.at("seed").get<uint64_t>(),
          structure_from_manifest(m)};
}

nlohmann::json state_dict_json(const model::GptConfig& cfg, int tp, const std::string& prefix,
                               bool aliases, bool unpadded) {
  nlohmann::json out = nlohmann::json::array();
  auto keys = model::gpt_state_dict(cfg, tp);
  if (!aliases) keys = model::without_aliases(keys, cfg);
  if (unpadded) unpad(keys, cfg);
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

namespace {

// Where a tensor of the checkpoint lives: its stage, and its spec on each TP rank.
struct Stored {
  size_t stage = 0;
  std::vector<const model::ParamSpec*> by_tp;
};

// Flat index, in TP rank `t`'s shard, of full-tensor row r column c of a vocabulary matrix
// (replicated, or split by rows), or nullopt when the checkpoint has no such row (beyond its
// `rows`: the padded ones, or the vocabulary's own when the save stripped the padding).
std::optional<std::pair<size_t, size_t>> vocab_element(const Stored& at, int64_t rows, int64_t r,
                                                       int64_t c) {
  const model::ParamSpec& s = *at.by_tp.front();
  if (r >= rows) return std::nullopt;
  const size_t t = s.split == model::Split::kRows ? static_cast<size_t>(r / s.local_rows) : 0;
  const model::ParamSpec& on = *at.by_tp[t];
  return std::pair{t, on.offset + static_cast<size_t>((r % on.local_rows) * on.local_cols + c)};
}

}  // namespace

void restore_by_name(const std::string& dir, const nlohmann::json& m, const NamedLoad& load,
                     const model::ParamLayout& layout, int tp_rank, const NamedSlice& params,
                     const NamedSlice& exp_avg, const NamedSlice& exp_avg_sq) {
  const auto ckpt = model_from_manifest(m);
  const int tp = m.at("layout").at("tp"), pp = m.at("layout").at("pp");
  // Every stage of every TP rank: a block may sit in another stage when the layer counts differ,
  // and a vocabulary matrix split by rows in the checkpoint may be whole in this model.
  std::vector<std::vector<model::ParamLayout>> layouts(static_cast<size_t>(tp));
  std::vector<std::vector<ModelShardState>> states(static_cast<size_t>(tp));
  std::map<std::string, Stored> where;
  for (int t = 0; t < tp; ++t) {
    auto& lt = layouts[static_cast<size_t>(t)];
    lt.reserve(static_cast<size_t>(pp));
    for (int p = 0; p < pp; ++p) {
      lt.emplace_back(ckpt, tp, t, pp, p);
      states[static_cast<size_t>(t)].push_back(
          reassemble_model_shard(dir, m, t, p, lt.back().total()));
      for (auto& s : lt.back().specs()) {
        Stored& at = where[model::state_dict_key(s.name)];
        at.stage = static_cast<size_t>(p);
        at.by_tp.push_back(&s);
      }
    }
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
    const Stored& at = where.at(src->second);
    const model::ParamSpec* from = at.by_tp[static_cast<size_t>(tp_rank)];
    const bool same_split = from->numel() == s.numel() && from->split == s.split;
    const bool vocab_matrix = s.name == "wte" || s.name == "lm_head.weight";
    if (!same_split && !vocab_matrix) {
      raise<CheckpointError>("checkpoint {}: {} holds {} elements on tp rank {}, this model {}",
                             dir, src->second, from->numel(), tp_rank, s.numel());
    }
    const int64_t rows = m.value("state_dict_unpadded", false) ? ckpt.vocab : from->rows;
    auto copy = [&](const NamedSlice& to, auto member) {
      const size_t begin = std::max(to.lo, s.offset),
                   end = std::min(to.lo + to.count, s.offset + s.numel());
      for (size_t i = begin; i < end; ++i) {
        if (same_split) {
          const auto& v = states[static_cast<size_t>(tp_rank)][at.stage].*member;
          to.data[i - to.lo] = v[from->offset + (i - s.offset)];
          continue;
        }
        // Another split or padding: by the element's row of the whole tensor. Rows the
        // checkpoint does not have (this model's padding) keep their values.
        const int64_t k = static_cast<int64_t>(i - s.offset);
        const int64_t full = layout.full_index(s, k / s.local_cols, k % s.local_cols);
        const auto e = vocab_element(at, rows, full / s.cols, full % s.cols);
        if (e) to.data[i - to.lo] = (states[e->first][at.stage].*member)[e->second];
      }
    };
    copy(params, &ModelShardState::params);
    copy(exp_avg, &ModelShardState::exp_avg);
    copy(exp_avg_sq, &ModelShardState::exp_avg_sq);
  }
}

}  // namespace fl::train
