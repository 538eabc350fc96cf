// The tokenizer folder of a run whose job builds a tokenizer (workload.tokenizer.type): the files
// a data's preprocessing leaves for the vocabulary the data was tokenized with, which the harness
// writes into RUN/tokenizer/ before the launch and names to the ranks (--tokenizer-dir).
#pragma once

#include <map>
#include <string>

#include "harness/model/scenario.hpp"

namespace fl::harness {

// The model preset's vocabulary (GptConfig::tiny() and small()): what the synthetic data holds.
int preset_vocab(const std::string& model);

// Whether the scenario's job builds a tokenizer (workload.tokenizer.type set, not none).
bool uses_tokenizer(const Scenario& s);

// vocab.json (GPT-2's token-to-id object, '<|endoftext|>' last), merges.txt (its '#version'
// header and one merge per composite token) and tokenizer.json (the tokenizers library's BPE
// model with the same vocabulary, '<|endoftext|>' also an added special token) for `vocab` ids.
std::map<std::string, std::string> tokenizer_files(int vocab);

}  // namespace fl::harness
