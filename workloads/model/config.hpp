// Model and parallel-layout configuration, with the up-front checks that reject an impossible
// layout naming the sizes involved (as Megatron and DeepSpeed do at start-up).
#pragma once

#include <cstdint>
#include <string>

#include "workloads/model/moe_config.hpp"

namespace fl::model {

// How the vocabulary and the two matrices that hold it are built (docs/workloads.md#structure).
struct Structure {
  // One tensor for the input embedding and the LM head: the head reads wte, and the state dict
  // lists it twice ("wte.weight" and its alias "lm_head.weight"), as torch's state_dict() lists
  // a shared parameter under every name.
  bool tie_embeddings = false;
  // Megatron's VocabParallelEmbedding and column-parallel LM head: each TP rank holds a slice of
  // the (padded) vocabulary's rows of wte and lm_head.
  bool vocab_parallel = false;
  // Megatron's make_vocab_size_divisible_by: the vocabulary is padded up to a multiple of this
  // times the number of vocabulary shards (TP size under vocab_parallel, else 1).
  int divisible_by = 1;
  // An explicit padded size (Megatron's padded_vocab_size from a checkpoint's args); 0: computed.
  int padded_vocab = 0;
  // The head's output under vocab_parallel: true leaves the logits sharded (each TP rank its
  // slice, the loss a vocab-parallel cross entropy), false all-gathers them over TP first.
  bool parallel_output = true;
  bool operator==(const Structure&) const = default;
};

struct GptConfig {
  int vocab = 64;    // V
  int d_model = 32;  // C
  int layers = 2;    // L
  int heads = 4;     // NH
  int seq_len = 16;  // T (maximum context)
  uint64_t seed = 1234;
  Structure structure{};
  MoeConfig moe{};

  static GptConfig tiny() { return {}; }
  static GptConfig small() { return {256, 128, 4, 8, 64, 1234, {}, {}}; }
};

struct Layout {
  int world = 1;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int zero = 0;  // ZeRO stage 0..3
};

// Megatron's _vocab_size_with_padding: `vocab` rounded up to a multiple of divisible_by x shards
// (50257 -> 50304 with 128 at TP 1, -> 50432 at TP 2).
int vocab_size_with_padding(int vocab, int divisible_by, int shards);
// The rows wte and lm_head have for this model at TP size `tp`: structure.padded_vocab, or the
// vocabulary padded for its shards (vocab_parallel: tp; else 1). The vocabulary itself when no
// padding is asked for.
int padded_vocab(const GptConfig& m, int tp);
// How many TP ranks split the vocabulary: tp under vocab_parallel, else 1.
inline int vocab_shards(const GptConfig& m, int tp) {
  return m.structure.vocab_parallel ? tp : 1;
}

// Throws fl::Error naming the sizes when the layout cannot run this model on this world.
void validate(const GptConfig& m, const Layout& l);

}  // namespace fl::model
