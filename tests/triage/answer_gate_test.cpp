// The ranker's answer gate (stop 50, docs/triage-history.md "Stop 50: the answer gate"): each
// relaxed opening is its own setting of cues.yaml; each answer it gives is weak and says which
// opening it came through; a docs typo, a question in another language and a bare "it does not
// work" still get "no distributed-failure signature found".
#include "harness/triage/triage.hpp"
#include "tests/support/scratch.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

// The shipped ranker folder with `settings` ("key: value" lines) replacing cues.yaml's own.
Tables tables_with(const std::string& name, const std::string& settings) {
  const fs::path dir =
      ::fl::test::removed_at_exit(fs::temp_directory_path() / ("fl_answer_gate_test_" + name + "." +
                                                               std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"priors.yaml", "words.yaml"})
    fs::copy_file(fs::path(default_ranker_dir()) / f, dir / f);
  std::ifstream in(fs::path(default_ranker_dir()) / "cues.yaml");
  std::string cues((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at < settings.size()) {
    const size_t end = settings.find('\n', at);
    const std::string line = settings.substr(at, end - at);
    const std::string key = "\n  " + line.substr(0, line.find(':') + 1);
    const size_t k = cues.find(key);
    EXPECT_NE(k, std::string::npos) << key;
    if (k != std::string::npos) cues.replace(k + 1, cues.find('\n', k + 1) - k - 1, "  " + line);
    at = end == std::string::npos ? settings.size() : end + 1;
  }
  std::ofstream(dir / "cues.yaml") << cues;
  return load_tables(default_signature_dir(), default_taxonomy_path(), dir.string());
}

Result run(const std::string& text, const Tables& t) {
  return triage(Input{text, false, text.size()}, t);
}

const char* kOff =
    "answer_without_context: false\nanswer_without_failure_word: false\nanswer_min_words: 0";
const char* kNoContextOnly =
    "answer_without_context: true\nanswer_without_failure_word: false\nanswer_min_words: 2";
const char* kNoFailureWordOnly =
    "answer_without_context: false\nanswer_without_failure_word: true\nanswer_min_words: 0";
const char* kOn =
    "answer_without_context: true\nanswer_without_failure_word: true\nanswer_min_words: 2";

// A failure told without a framework, launcher or table line.
const char* kNoContext =
    "After the second epoch the accuracy is wrong compared with a single card run.\n";
// A run's layout with no word of failure and no table line (the report's title said it).
const char* kNoFailureWord =
    "We train a Megatron model with tensor parallel 4 and pipeline parallel 2 and see this after "
    "the first epoch.\n";

TEST(TriageAnswerGate, AFailureWordWithoutContextIsAnsweredWeaklyWhenSwitchedOn) {
  EXPECT_EQ(run(kNoContext, tables_with("nc_off", kOff)).kind, Result::Kind::kNone);
  const Tables on = tables_with("nc_on", kNoContextOnly);
  const auto r = run(kNoContext, on);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_NE(r.symptoms.front().basis.find("the answer gate: a failure word without distributed "
                                          "context (cues.yaml answer_without_context)"),
            std::string::npos)
      << r.symptoms.front().basis;
  EXPECT_NE(format_result(r, on).find("Confidence: weak ("), std::string::npos);
  // The other opening alone does not answer it.
  EXPECT_EQ(run(kNoContext, tables_with("nc_other", kNoFailureWordOnly)).kind, Result::Kind::kNone);
}

TEST(TriageAnswerGate, ContextWithoutAFailureWordIsAnsweredWeaklyWhenSwitchedOn) {
  EXPECT_EQ(run(kNoFailureWord, tables_with("nf_off", kOff)).kind, Result::Kind::kNone);
  const Tables on = tables_with("nf_on", kNoFailureWordOnly);
  const auto r = run(kNoFailureWord, on);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_NE(r.symptoms.front().basis.find("(cues.yaml answer_without_failure_word)"),
            std::string::npos)
      << r.symptoms.front().basis;
  EXPECT_EQ(run(kNoFailureWord, tables_with("nf_other", kNoContextOnly)).kind, Result::Kind::kNone);
}

// answer_min_words: "it does not work" alone has a failure word and no learned word of a stage.
TEST(TriageAnswerGate, ABareFailureWordNeedsLearnedWordsOfItsStage) {
  const char* text = "It does not work.\n";
  EXPECT_EQ(run(text, tables_with("mw_0",
                                  "answer_without_context: true\nanswer_without_failure_word: "
                                  "false\nanswer_min_words: 0"))
                .kind,
            Result::Kind::kFound);
  EXPECT_EQ(run(text, tables_with("mw_2", kNoContextOnly)).kind, Result::Kind::kNone);
}

// With every opening on, what is no failure report still gets "none".
TEST(TriageAnswerGate, ADocsTypoAndAQuestionStillGetNoneWithEveryOpening) {
  const Tables on = tables_with("bad_on", kOn);
  for (const char* text : {
           "Fix typo in docs/getting-started.md\n"
           "The sentence \"the the launcher reads the hostfile\" repeats a word.\n"
           "This PR removes the duplicate word. No code change.\n",
           "请问如何在多机上使用这个框架？谢谢。\n文档里没有写。\n",
           "Fix typo in the DeepSpeed launcher docs: torchrun is spelled torchrn twice.\n"
           "No code change; the multi-node example is unchanged.\n",
           "NCCL INFO comm 0x556fe4c70860 rank 3 nranks 16 cudaDev 3 nvmlDev 3 - Init COMPLETE\n",
       }) {
    EXPECT_EQ(run(text, on).kind, Result::Kind::kNone) << text;
  }
}

// Stop 51 (docs/triage-history.md "Stop 51: the answer gate again"): a failure stated in prose,
// with a framework or layout word and none of the older failure words, is answered with the shipped
// settings: cues.yaml's failure list reads a regression, a step that no longer runs, a launcher
// that complains, a "we hit this".
TEST(TriageAnswerGate, AFailureStatedInProseIsAnsweredWithTheShippedSettings) {
  const Tables shipped = tables_with("prose", "");
  for (const char* text : {
           "Since megatron-core 0.15.0 our pretraining script with tensor parallel 2 no longer "
           "runs on 8 GPUs.\n",
           "With DeepSpeed ZeRO stage 2 the step time on 2 nodes is four times that of 1 node, a "
           "regression since 0.9.\n",
           "The DeepSpeed launcher complains that the hostfile does not exist on the second "
           "node.\n",
           "We hit this with Megatron-LM on 2 nodes: after resuming the checkpoint the loss on "
           "rank 1 differs from rank 0.\n",
       }) {
    const auto r = run(text, shipped);
    EXPECT_EQ(r.kind, Result::Kind::kFound) << text;
    EXPECT_EQ(r.basis, Result::Basis::kInferred) << text;
  }
}

// A question with distributed words and no failure word is no failure report: a question word
// (cues.yaml healthy: "is it", "whether", "wonder") keeps even answer_without_failure_word from
// answering it.
TEST(TriageAnswerGate, AQuestionWithoutAFailureWordGetsNoneWithTheSwitchOn) {
  const Tables on = tables_with("question", kNoFailureWordOnly);
  for (const char* text : {
           "Is it necessary to export NCCL_SOCKET_IFNAME on every node for a multi-node "
           "allreduce?\n",
           "I wonder whether torchrun sets LOCAL_RANK before the process group is created.\n",
       }) {
    EXPECT_EQ(run(text, on).kind, Result::Kind::kNone) << text;
  }
  // The same layout told as a report is still answered through the switch.
  EXPECT_EQ(run(kNoFailureWord, on).kind, Result::Kind::kFound);
}

// Stop 51: a healthy word only inside a path (`examples/...`) does not keep a launcher line from
// being answered; the same word in prose still does.
TEST(TriageAnswerGate, AHealthyWordOnlyInAPathDoesNotKeepTheAnswerOff) {
  const Tables shipped = tables_with("path", "");
  for (const char* text : {
           "torchrun --nproc-per-node 2 examples/run_simple_mcore_train_loop.py\n",
           "deepspeed --num_gpus=2 examples/pytorch/translation/run_translation.py --deepspeed "
           "ds_config_zero3.json\n",
       }) {
    EXPECT_EQ(run(text, shipped).kind, Result::Kind::kFound) << text;
  }
  EXPECT_EQ(run("The example runs with: torchrun --nproc-per-node 2 "
                "examples/run_simple_mcore_train_loop.py\n",
                shipped)
                .kind,
            Result::Kind::kNone);
  // A healthy word that runs past the path it starts in ("docs/how to ...") is in prose.
  EXPECT_EQ(run("See docs/how to launch torchrun --nproc-per-node 2 train.py\n", shipped).kind,
            Result::Kind::kNone);
  // One past the 4096 bytes of the line a hit keeps is still a healthy word (it is not shown,
  // so it cannot be shown to be in a path).
  const std::string long_line = "torchrun --nproc-per-node 2 train.py --data " +
                                std::string(5000, 'x') + " is it possible to keep the order?\n";
  EXPECT_EQ(run(long_line, shipped).kind, Result::Kind::kNone);
}

// Stop 55 (docs/triage-history.md "Stop 55: 'none' as a ranked answer"): a declined answer still
// ranks what it would name if the text is a failure after all: 'none' first, then two symptoms of
// the stage its words lean to, each with the lines behind it; empty and binary input get none.
TEST(TriageAnswerGate, ADeclinedAnswerRanksItsGuessesAfterNone) {
  const Tables shipped = tables_with("guesses", "");
  const auto r =
      run("This reverts the commit that broke the nv-inference tests: the kernel injection policy "
          "sets the attribute on the module instead of its attention.\n",
          shipped);
  ASSERT_EQ(r.kind, Result::Kind::kNone);
  ASSERT_EQ(r.guesses.size(), 2u);
  for (const auto& g : r.guesses) {
    EXPECT_EQ(g.id.substr(0, 2), "5.") << g.id;  // the inference words lean stage 5
    EXPECT_FALSE(g.evidence.empty()) << g.id;
  }
  EXPECT_NE(r.guesses[0].id, r.guesses[1].id);
  const std::string text = format_result(r, shipped);
  EXPECT_NE(text.find("no distributed-failure signature found"), std::string::npos) << text;
  EXPECT_NE(text.find("If it is a failure after all (ranked after 'none'"), std::string::npos)
      << text;
  EXPECT_TRUE(run("", shipped).guesses.empty());
  EXPECT_TRUE(run(std::string("\x7f"
                              "ELF\0\0\0",
                              7),
                  shipped)
                  .guesses.empty());
  // An answer that is given has no guesses: its own candidates are the ranking.
  const auto answered = run(kNoFailureWord, tables_with("guesses_on", kNoFailureWordOnly));
  ASSERT_EQ(answered.kind, Result::Kind::kFound);
  EXPECT_TRUE(answered.guesses.empty());
}

}  // namespace
}  // namespace fl::triage
