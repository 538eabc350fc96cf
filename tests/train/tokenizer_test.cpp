// workload.tokenizer (workloads/train/tokenizer.cpp): the job's tokenizer is built from the files
// its arguments name, over the folder the harness writes (harness/model/tokenizer_files.cpp).
// Each type refuses a job without its arguments in Megatron's words, a file of another format is
// refused where Megatron's reader would fail, and the vocabulary read is the one written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "harness/model/tokenizer_files.hpp"
#include "workloads/train/tokenizer.hpp"

namespace fl::train {
namespace {

namespace fs = std::filesystem;

class TokenizerFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("faultline-tokenizer-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (const auto& [name, text] : harness::tokenizer_files(64)) {
      std::ofstream(dir_ / name) << text;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  TokenizerOptions opts(const std::string& type) const {
    TokenizerOptions o;
    o.type = type;
    o.dir = dir_.string();
    return o;
  }
  // The message build_tokenizer stops with, or "" when it builds.
  static std::string refusal(const TokenizerOptions& o) {
    try {
      build_tokenizer(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenizerFolder, TheFolderHoldsOneVocabularyInEachFormat) {
  const auto files = harness::tokenizer_files(64);
  const auto vocab = nlohmann::json::parse(files.at("vocab.json"));
  EXPECT_EQ(vocab.size(), 64u);
  EXPECT_EQ(vocab.at("<|endoftext|>"), 63);
  const auto hf = nlohmann::json::parse(files.at("tokenizer.json"));
  EXPECT_EQ(hf.at("model").at("vocab"), vocab);
  // One merge per composite token: 64 less the 11 base symbols and the end-of-document token.
  EXPECT_EQ(hf.at("model").at("merges").size(), 52u);
  EXPECT_EQ(files.at("merges.txt").rfind("#version: 0.2\nt 0\nt 1\n", 0), 0u);
  EXPECT_THROW(harness::tokenizer_files(12), Error);
}

TEST_F(TokenizerFolder, EachTypeReadsItsOwnFilesAndGetsTheirVocabulary) {
  auto gpt2 = opts("GPT2BPETokenizer");
  gpt2.vocab_file = "vocab.json";
  gpt2.merge_file = "merges.txt";
  const Tokenizer a = build_tokenizer(gpt2);
  EXPECT_EQ(a.vocab, 64);
  EXPECT_EQ(a.eod, 63);
  EXPECT_EQ(a.merges, 52);

  auto hf = opts("HuggingFaceTokenizer");
  for (const char* model : {"tokenizer.json", "."}) {
    hf.tokenizer_model = model;
    const Tokenizer b = build_tokenizer(hf);
    EXPECT_EQ(b.vocab, 64) << model;
    EXPECT_EQ(b.eod, 63) << model;
  }

  auto null = opts("NullTokenizer");
  null.vocab_size = 63;  // ids 0..62 and the end-of-document id 63
  const Tokenizer c = build_tokenizer(null);
  EXPECT_EQ(c.vocab, 64);
  EXPECT_EQ(c.eod, 63);
  EXPECT_EQ(build_tokenizer(opts("none")).vocab, 0);
}

TEST_F(TokenizerFolder, ATypeWithoutItsArgumentsStopsAtMegatronsAssertion) {
  auto gpt2 = opts("GPT2BPETokenizer");
  gpt2.tokenizer_model = "tokenizer.json";  // NVIDIA/Megatron-LM#958
  EXPECT_NE(refusal(gpt2).find("AssertionError: assert args.vocab_file is not None"),
            std::string::npos);
  EXPECT_NE(refusal(gpt2).find("--tokenizer-model tokenizer.json is not read by this type"),
            std::string::npos);
  gpt2.vocab_file = "vocab.json";
  EXPECT_NE(refusal(gpt2).find("AssertionError: assert args.merge_file is not None"),
            std::string::npos);
  EXPECT_NE(refusal(opts("NullTokenizer")).find("assert args.vocab_size is not None"),
            std::string::npos);
  EXPECT_NE(refusal(opts("HuggingFaceTokenizer")).find("--tokenizer-model is None"),
            std::string::npos);
  EXPECT_THROW(build_tokenizer(opts("GPT2BPETokenizer")), ConfigError);
}

TEST_F(TokenizerFolder, AFileOfAnotherFormatOrAbsentIsRefusedWhereMegatronsReaderFails) {
  auto gpt2 = opts("GPT2BPETokenizer");
  gpt2.merge_file = "merges.txt";
  gpt2.vocab_file = "tokenizer.json";  // a tokenizer.json's top level is no token-to-id map
  EXPECT_NE(refusal(gpt2).find("KeyError: '<|endoftext|>'"), std::string::npos);
  EXPECT_NE(refusal(gpt2).find("it is a Hugging Face tokenizer.json"), std::string::npos);
  gpt2.vocab_file = "gpt2-vocab.json";
  EXPECT_NE(refusal(gpt2).find("FileNotFoundError: [Errno 2] No such file or directory: '" +
                               (dir_ / "gpt2-vocab.json").string() + "'"),
            std::string::npos);
  gpt2.vocab_file = "merges.txt";
  EXPECT_NE(refusal(gpt2).find("JSONDecodeError"), std::string::npos);

  auto hf = opts("HuggingFaceTokenizer");
  hf.tokenizer_model = "vocab.json";  // a vocab.json has no model.vocab
  EXPECT_NE(refusal(hf).find("untagged enum ModelWrapper"), std::string::npos);
  hf.tokenizer_model = "missing";
  EXPECT_NE(refusal(hf).find("OSError: Can't load tokenizer for 'missing'"), std::string::npos);
}

}  // namespace
}  // namespace fl::train
