// workload.tokenizer inside fl-train, over the folder the harness writes: the tokenizer's
// vocabulary, padded, sizes the embedding; one smaller than the data's ids stops the first
// forward; a padded size below it is refused before rank 0 prints the padding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/model/tokenizer_files.hpp"
#include "tests/support/scratch.hpp"
#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

// The harness's folder for the tiny model's 64 ids, once per process.
const std::string& folder() {
  static const std::string dir = [] {
    const fs::path d = removed_at_exit(fs::temp_directory_path() /
                                       ("faultline-tokenizer-train-" + std::to_string(::getpid())));
    fs::create_directories(d);
    for (const auto& [name, text] : harness::tokenizer_files(64)) std::ofstream(d / name) << text;
    return d.string();
  }();
  return dir;
}

TrainRun train(std::vector<std::string> args) {
  args.insert(args.begin(), {"--dp", "2", "--tokenizer-dir", folder()});
  return run_train(FAULTLINE_TRAIN, 2, args, 2);
}

bool says(const TrainRun& r, const std::string& text) {
  return r.proc.output.find(text) != std::string::npos;
}

TEST(TokenizerTrain, TheTokenizersVocabularyPaddedSizesTheEmbedding) {
  const auto r = train({"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", ".",
                        "--make-vocab-size-divisible-by", "128"});
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(r.steps.size(), 2u);
  EXPECT_TRUE(says(r, "> building HuggingFaceTokenizer tokenizer ..."));
  EXPECT_TRUE(says(r, " > padded vocab (size: 64) with 64 dummy tokens (new size: 128)"))
      << r.proc.output;
}

TEST(TokenizerTrain, ATokenizerSmallerThanTheDataStopsTheFirstForward) {
  // NullTokenizer: 39 ids and its end-of-document id, 40 rows for data of 64 ids.
  const auto r = train({"--tokenizer-type", "NullTokenizer", "--vocab-size", "39"});
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_TRUE(says(r, "is outside the vocabulary (size 40)")) << r.proc.output;
  EXPECT_TRUE(r.steps.empty());
}

TEST(TokenizerTrain, APaddedSizeBelowTheTokenizersIsRefusedBeforeThePaddingIsPrinted) {
  const auto r = train({"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "vocab.json",
                        "--merge-file", "merges.txt", "--padded-vocab-size", "32"});
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_TRUE(says(r, "workload.structure.padded_vocab is 32, smaller than the vocabulary (64"))
      << r.proc.output;
  EXPECT_FALSE(says(r, "padded vocab (size:")) << r.proc.output;
}

}  // namespace
}  // namespace fl::test
