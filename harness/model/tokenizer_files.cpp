#include "harness/model/tokenizer_files.hpp"

#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace fl::harness {

int preset_vocab(const std::string& model) {
  return model == "small" ? 256 : 64;
}

bool uses_tokenizer(const Scenario& s) {
  const auto it = s.workload.options.find("workload.tokenizer.type");
  return it != s.workload.options.end() && it->second && it->second.IsScalar() &&
         it->second.Scalar() != "none";
}

std::map<std::string, std::string> tokenizer_files(int vocab) {
  if (vocab < 13) raise<Error>("a tokenizer folder needs at least 13 tokens (asked for {})", vocab);
  // Byte-level BPE's shape in small: the base symbols "t" and the ten digits, then composite
  // tokens "t0", "t1", ... each made by one merge of a shorter token and a digit, then the
  // end-of-document token with the last id, as GPT-2's 50256.
  std::vector<std::string> tokens = {"t"};
  for (char d = '0'; d <= '9'; ++d) tokens.emplace_back(1, d);
  std::vector<std::string> merges;
  for (int n = 0; static_cast<int>(tokens.size()) < vocab - 1; ++n) {
    const std::string s = fmt::format("t{}", n);
    merges.push_back(s.substr(0, s.size() - 1) + " " + s.back());
    tokens.push_back(s);
  }
  nlohmann::ordered_json encoder = nlohmann::ordered_json::object();
  for (size_t i = 0; i < tokens.size(); ++i) encoder[tokens[i]] = i;
  encoder["<|endoftext|>"] = vocab - 1;
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& m : merges) merges_txt += m + "\n";
  nlohmann::ordered_json hf = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", vocab - 1},
         {"content", "<|endoftext|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", encoder}, {"merges", merges}}}};
  return {{"vocab.json", encoder.dump() + "\n"},
          {"merges.txt", merges_txt},
          {"tokenizer.json", hf.dump(2) + "\n"}};
}

}  // namespace fl::harness
