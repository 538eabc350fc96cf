#include "workloads/model/config.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"

namespace fl::model {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The vocabulary options: the padding they ask for must hold the vocabulary and split evenly.
void validate_vocab(const GptConfig& m, const Layout& l) {
  const Structure& s = m.structure;
  if (s.divisible_by < 1) {
    raise<ConfigError>(
        "workload.structure.make_vocab_size_divisible_by is {}: allowed is a positive integer "
        "(Megatron's default is 128; 1 pads only to the number of vocabulary shards)",
        s.divisible_by);
  }
  const int shards = vocab_shards(m, l.tp);
  if (s.padded_vocab != 0 && s.padded_vocab < m.vocab) {
    raise<ConfigError>(
        "workload.structure.padded_vocab is {}, smaller than the vocabulary ({} tokens): "
        "allowed is 0 (padded from make_vocab_size_divisible_by) or at least {}",
        s.padded_vocab, m.vocab, m.vocab);
  }
  if (s.padded_vocab != 0 && s.padded_vocab % shards != 0) {
    raise<ConfigError>(
        "workload.structure.padded_vocab is {}, which the {} vocabulary shards (vocab_parallel "
        "at tensor-parallel size {}) do not divide: allowed is 0 or a multiple of {} of at "
        "least {} (e.g. {})",
        s.padded_vocab, shards, l.tp, shards, m.vocab, vocab_size_with_padding(m.vocab, 1, shards));
  }
}

}  // namespace

int vocab_size_with_padding(int vocab, int divisible_by, int shards) {
  const int multiple = divisible_by * shards;
  return (vocab + multiple - 1) / multiple * multiple;
}

int padded_vocab(const GptConfig& m, int tp) {
  if (m.structure.padded_vocab > 0) return m.structure.padded_vocab;
  return vocab_size_with_padding(m.vocab, m.structure.divisible_by, vocab_shards(m, tp));
}

void validate(const GptConfig& m, const Layout& l) {
  if (m.vocab <= 0 || m.d_model <= 0 || m.layers <= 0 || m.heads <= 0 || m.seq_len <= 0) {
    raise<ConfigError>(
        "invalid model: vocab {}, d_model {}, layers {}, heads {}, seq_len {} must all be "
        "positive",
        m.vocab, m.d_model, m.layers, m.heads, m.seq_len);
  }
  if (m.d_model % m.heads != 0) {
    // Megatron's divide(hidden_size, num_attention_heads) for the head size (ensure_divisibility).
    raise<ConfigError>(
        "invalid model: {} is not divisible by {} (hidden size d_model {} over {} attention heads "
        "gives no whole head size; workload.shape.heads allowed here: {})",
        m.d_model, m.heads, m.d_model, m.heads, fmt::join(divisors(m.d_model), ", "));
  }
  if (l.dp < 1 || l.tp < 1 || l.pp < 1) {
    raise<ConfigError>("invalid layout: dp {}, tp {}, pp {} must all be at least 1", l.dp, l.tp,
                       l.pp);
  }
  if (l.tp > l.world || l.pp > l.world) {
    raise<ConfigError>(
        "invalid layout: model-parallel size (tp {} x pp {}) is larger than the world size {}",
        l.tp, l.pp, l.world);
  }
  if (l.dp * l.tp * l.pp != l.world) {
    raise<ConfigError>("invalid layout: dp {} x tp {} x pp {} = {} ranks, but the world has {}",
                       l.dp, l.tp, l.pp, l.dp * l.tp * l.pp, l.world);
  }
  if (m.heads % l.tp != 0) {
    // Megatron's TransformerConfig check, in its words.
    raise<ConfigError>(
        "num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({}). "
        "(invalid layout: topology.tp allowed for {} heads: {})",
        m.heads, l.tp, m.heads, fmt::join(divisors(m.heads), ", "));
  }
  if (m.d_model % l.tp != 0 || (4 * m.d_model) % l.tp != 0) {
    raise<ConfigError>("invalid layout: tensor-parallel size {} does not divide the hidden size {}",
                       l.tp, m.d_model);
  }
  if (m.layers % l.pp != 0) {
    raise<ConfigError>("invalid layout: pipeline-parallel size {} does not divide the {} layers",
                       l.pp, m.layers);
  }
  validate_vocab(m, l);
  validate_moe(m, l);
  if (l.zero < 0 || l.zero > 3) {
    raise<ConfigError>("invalid layout: ZeRO stage {} does not exist (allowed 0-3)", l.zero);
  }
  if (l.zero > 0 && l.dp == 1) {
    raise<ConfigError>(
        "invalid layout: ZeRO stage {} partitions across data-parallel ranks, but dp is 1", l.zero);
  }
  if (l.zero >= 2 && l.pp > 1) {
    raise<ConfigError>(
        "invalid layout: ZeRO stage {} cannot be combined with pipeline parallelism (pp {}); "
        "use ZeRO-1 with pipelines",
        l.zero, l.pp);
  }
}

}  // namespace fl::model
