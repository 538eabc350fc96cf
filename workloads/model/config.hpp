// Model and parallel-layout configuration, with the up-front checks that reject an impossible
// layout naming the sizes involved (as Megatron and DeepSpeed do at start-up).
#pragma once

#include <cstdint>
#include <string>

namespace fl::model {

struct GptConfig {
  int vocab = 64;    // V
  int d_model = 32;  // C
  int layers = 2;    // L
  int heads = 4;     // NH
  int seq_len = 16;  // T (maximum context)
  uint64_t seed = 1234;

  static GptConfig tiny() { return {}; }
  static GptConfig small() { return {256, 128, 4, 8, 64, 1234}; }
};

struct Layout {
  int world = 1;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int zero = 0;  // ZeRO stage 0..3
};

// Throws fl::Error naming the sizes when the layout cannot run this model on this world.
void validate(const GptConfig& m, const Layout& l);

}  // namespace fl::model
