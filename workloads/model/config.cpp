#include "workloads/model/config.hpp"

#include "base/error.hpp"

namespace fl::model {

void validate(const GptConfig& m, const Layout& l) {
  if (m.vocab <= 0 || m.d_model <= 0 || m.layers <= 0 || m.heads <= 0 || m.seq_len <= 0) {
    raise<ConfigError>(
        "invalid model: vocab {}, d_model {}, layers {}, heads {}, seq_len {} must all be "
        "positive",
        m.vocab, m.d_model, m.layers, m.heads, m.seq_len);
  }
  if (m.d_model % m.heads != 0) {
    raise<ConfigError>("invalid model: d_model {} is not divisible by heads {}", m.d_model,
                       m.heads);
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
    raise<ConfigError>(
        "invalid layout: tensor-parallel size {} does not divide the number of heads {}", l.tp,
        m.heads);
  }
  if (m.d_model % l.tp != 0 || (4 * m.d_model) % l.tp != 0) {
    raise<ConfigError>("invalid layout: tensor-parallel size {} does not divide the hidden size {}",
                       l.tp, m.d_model);
  }
  if (m.layers % l.pp != 0) {
    raise<ConfigError>("invalid layout: pipeline-parallel size {} does not divide the {} layers",
                       l.pp, m.layers);
  }
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
