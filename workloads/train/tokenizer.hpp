// The job's tokenizer (workload.tokenizer, docs/workloads.md#tokenizer): built at start from the
// files its arguments name, as Megatron-LM's build_tokenizer does, and the source of the model's
// vocabulary. Each type reads its own arguments and refuses a job that lacks them:
// GPT2BPETokenizer a vocab.json (--vocab-file) and a merges.txt (--merge-file) and NullTokenizer
// a size (--vocab-size), with Megatron's assertions; HuggingFaceTokenizer a tokenizer.json or the
// folder that holds it (--tokenizer-model), in faultline's words (Megatron asserts nothing).
// Relative names are looked up in the job's tokenizer folder
// (--tokenizer-dir, which the harness fills with the files the data's preprocessing used).
#pragma once

#include <string>

namespace fl::train {

struct TokenizerOptions {
  std::string type = "none";  // none: no tokenizer, the model preset's vocabulary
  std::string dir;            // where relative file names are looked up
  std::string vocab_file, merge_file, tokenizer_model;
  int vocab_size = 0;  // NullTokenizer's; 0: not given
};

struct Tokenizer {
  std::string type;
  int vocab = 0;       // tokens, before Megatron's padding
  int eod = -1;        // the end-of-document id
  std::string source;  // the file it was read from ("" for NullTokenizer)
  int merges = 0;      // GPT2BPETokenizer: merges.txt's rules
};

// Builds the tokenizer; throws ConfigError with Megatron's assertion for a missing argument and
// Error for a file that is absent or not of the type's format. type "none" returns vocab 0.
Tokenizer build_tokenizer(const TokenizerOptions& o);

}  // namespace fl::train
