// faultline triage: signature tables load strictly, the ranking of real report excerpts, and bad
// input (empty, binary, off-topic, huge) gets a clear answer. What it reads: environment_test.cpp.
#include "harness/triage/triage.hpp"
#include "base/text_mask.hpp"
#include "harness/triage/scan.hpp"
#include "tests/support/scratch.hpp"
#include "tests/triage/tables.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>
#include <vector>

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

using test::tables;

using test::run;

// A scratch signature folder holding one file.
std::string write_table(const std::string& name, const std::string& body) {
  return test::write_scratch_table("fl_triage_test_", name, body);
}

using test::load_error;

TEST(TriageSignatures, TheShippedTablesLoad) {
  EXPECT_GT(tables().signatures.size(), 50u);
  EXPECT_GT(tables().env_rules.size(), 20u);
}

TEST(TriageSignatures, ABadRegexNamesFileLineAndColumn) {
  const auto dir = write_table("bad_regex",
                               "signatures:\n"
                               "  - id: broken\n"
                               "    needle: \"abc\"\n"
                               "    regex: '(abc'\n"
                               "    symptoms: {\"4.7\": 1}\n");
  const auto err = load_error(dir);
  EXPECT_EQ(err.rfind(dir + "/t.yaml:4:12: regex: '(abc' is not a valid ECMAScript regex: ", 0), 0u)
      << err;
}

TEST(TriageSignatures, AnUnknownKeyNamesFileLineColumnAndTheAllowedKeys) {
  const auto dir = write_table("unknown_key",
                               "signatures:\n"
                               "  - id: typo\n"
                               "    needle: \"abc\"\n"
                               "    regex: 'abc'\n"
                               "    symptom: {\"4.7\": 1}\n");
  EXPECT_EQ(load_error(dir),
            dir +
                "/t.yaml:5:5: signature: unknown key 'symptom' (allowed: context_for, env, "
                "fallback, icase, id, needle, note, regex, reinfer, root_cause, symptoms)");
}

TEST(TriageSignatures, ASymptomOutsideTheTaxonomyIsRejected) {
  const auto dir = write_table("unknown_symptom",
                               "signatures:\n"
                               "  - id: nope\n"
                               "    needle: \"abc\"\n"
                               "    regex: 'abc'\n"
                               "    symptoms: {\"4.99\": 1}\n");
  EXPECT_EQ(load_error(dir), dir + "/t.yaml:5:16: symptoms: '4.99' is not in the taxonomy");
}

// Triage's regex traits (regex.hpp) answer the word class and case folding from tables: every
// search must find what std::regex finds, with the same groups.
TEST(TriageRegex, MatchesWhatStdRegexMatches) {
  const std::vector<std::pair<std::string, bool>> patterns = {
      {R"(\b(fp16)\b(?!\s*:\s*false))", false},
      {R"(\bzero[ _-]?stage[ :=-]*([0-3])\b)", true},
      {R"(\Bstage(\d)\b)", false},
      {R"(([\w.-]+)\s*=\s*(\d+))", false},
      {R"(CUDA (out of memory)\.)", true},
      {R"([[:alpha:]]+_(\w+))", false}};
  const std::vector<std::string> texts = {"fp16: false",
                                          "fp16 on",
                                          "ZeRO Stage 3 with bf16",
                                          "zero_stage=2",
                                          "x_stage2 end",
                                          "world_size = 16",
                                          "cuda OUT OF MEMORY.",
                                          "é fp16 ü",
                                          "torch_dtype",
                                          "",
                                          "stage3_param_persistence_threshold = 10"};
  for (const auto& [pattern, icase] : patterns) {
    auto flags = std::regex::ECMAScript;
    if (icase) flags |= std::regex::icase;
    const Regex ours = make_regex(pattern, flags);
    const std::regex theirs(pattern, flags);
    for (const auto& text : texts) {
      std::smatch a, b;
      const bool found = regex_find(text, a, ours);
      ASSERT_EQ(found, std::regex_search(text, b, theirs)) << pattern << " on '" << text << "'";
      if (!found) continue;
      ASSERT_EQ(a.size(), b.size());
      for (size_t g = 0; g < a.size(); ++g) EXPECT_EQ(a.str(g), b.str(g)) << pattern << " " << g;
    }
  }
}

TEST(TriageRanking, AWatchdogTimeoutRanksHangFirstWithItsLine) {
  const auto r = run(
      "step 100 loss 2.3\n"
      "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=9314, OpType=_REDUCE_SCATTER_BASE, Timeout(ms)=600000)\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_EQ(r.symptoms[0].id, "4.11");
  EXPECT_EQ(r.symptoms[1].id, "4.7");
  ASSERT_EQ(r.symptoms[0].evidence.size(), 1u);
  EXPECT_EQ(r.symptoms[0].evidence[0].line, 2u);
  EXPECT_EQ(r.symptoms[0].evidence[0].signature, "c10d-watchdog-timeout");
  EXPECT_EQ(r.root_causes.at(0).id, "R4.6");
}

TEST(TriageRanking, RepeatedIdenticalLinesCountOnce) {
  const std::string line = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
  std::string many;
  for (int i = 0; i < 50; ++i) many += line;
  EXPECT_DOUBLE_EQ(run(line).symptoms.at(0).score, run(many).symptoms.at(0).score);
}

// The general signatures (written from the frameworks' own error texts, not from one issue).
TEST(TriageRanking, TwoRanksOnOneGpuIsALaunchSetupFailure) {
  const auto r =
      run("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
          "ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details)\n"
          "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  EXPECT_EQ(r.symptoms.at(0).id, "2.1");
  EXPECT_EQ(r.root_causes.at(0).id, "R2.1");
  const auto& ev = r.symptoms.at(0).evidence;
  EXPECT_TRUE(std::any_of(ev.begin(), ev.end(), [](const EvidenceLine& e) {
    return e.line == 2 && e.signature == "duplicate-gpu";
  }));
}

TEST(TriageRanking, AnIllegalMemoryAccessIsAKernelRuntimeError) {
  const auto r = run("RuntimeError: CUDA error: an illegal memory access was encountered\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "4.3");
  EXPECT_EQ(r.root_causes.at(0).id, "R4.4");
}

TEST(TriageRanking, DdpUnfinishedReductionPointsAtTheTrainingGraph) {
  const auto r = run(
      "RuntimeError: Expected to have finished reduction in the prior iteration before starting "
      "a new one.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "4.3");
  EXPECT_EQ(r.root_causes.at(0).id, "R4.6");
}

TEST(TriageConfidence, ContextLinesAloneGiveAWeakAnswerThatSaysSo) {
  const auto r = run("replace_with_kernel_inject=True\nmp_size=2\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kContext);
  EXPECT_EQ(r.stage, 5);
  EXPECT_NE(format_result(r, tables())
                .find("Confidence: weak (no error text matched; the answer rests on context lines "
                      "only)\n"),
            std::string::npos);
}

// Learned words (fallback: true) answer only when the tables find nothing, and two must agree.
TEST(TriageConfidence, LearnedWordsAnswerOnlyWhenTwoAgreeAndTheTablesFoundNothing) {
  const auto dir =
      write_table("learned",
                  "signatures:\n"
                  "  - {id: oom, needle: \"out of memory\", regex: 'out of memory', "
                  "symptoms: {\"4.2\": 3}}\n"
                  "  - {id: learned-alpha, needle: alpha, regex: '\\balpha\\b', "
                  "fallback: true, symptoms: {\"4.11\": 0.6}}\n"
                  "  - {id: learned-beta, needle: beta, regex: '\\bbeta\\b', "
                  "fallback: true, symptoms: {\"4.11\": 0.6}, root_cause: {R4.7: 1}}\n");
  const auto t = load_tables(dir, default_taxonomy_path(), "none");  // the tiers alone
  auto go = [&](const std::string& text) {
    std::istringstream in(text);
    return triage(read_input(in, 1u << 20), t);
  };
  const auto both = go("alpha\nbeta\n");
  ASSERT_EQ(both.kind, Result::Kind::kFound);
  EXPECT_EQ(both.basis, Result::Basis::kLearned);
  EXPECT_EQ(both.symptoms.at(0).id, "4.11");
  EXPECT_EQ(both.symptoms.at(0).evidence.size(), 2u);
  EXPECT_EQ(both.root_causes.at(0).id, "R4.7");
  EXPECT_NE(format_result(both, t).find("Confidence: weak (no table signature matched"),
            std::string::npos);
  EXPECT_EQ(go("alpha alone\n").kind, Result::Kind::kNone);
  const auto table = go("alpha\nbeta\nCUDA out of memory\n");
  ASSERT_EQ(table.kind, Result::Kind::kFound);
  EXPECT_EQ(table.basis, Result::Basis::kTables);
  EXPECT_EQ(table.symptoms.size(), 1u);  // the learned words add nothing next to a table answer
  EXPECT_EQ(table.symptoms.at(0).id, "4.2");
}

// The ranker (ranker.hpp): where the tables reach no answer, a failure told in prose with
// distributed context gets three candidates of the stage its words point at, each with the lines.
// (Stop 50: "stops printing" and "nothing happens" became table rows, stage4_training_prose.yaml;
// the sentence here is one no row reads.)
TEST(TriageRanker, AProseHangInTrainingGetsThreeStageFourCandidatesWithItsWords) {
  const std::string text =
      "deepspeed --num_gpus 8 train.py\n"
      "After a few hundred iterations the loss line is not printed anymore.\n";
  const auto without =
      triage(Input{text, false, text.size()},
             load_tables(default_signature_dir(), default_taxonomy_path(), "none"));
  EXPECT_EQ(without.kind, Result::Kind::kNone);  // the tables alone: no answer
  const auto r = run(text);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
  EXPECT_EQ(r.stage, 4);
  ASSERT_EQ(r.symptoms.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    const Candidate& c = r.symptoms[i];
    EXPECT_EQ(c.id.rfind("4.", 0), 0u) << c.id;
    EXPECT_NE(c.basis.find("tune stage-4 issues"), std::string::npos) << c.basis;
    // The sentence is evidence (since stop 55's release the learned 'train' of line 1 is too).
    EXPECT_TRUE(std::any_of(c.evidence.begin(), c.evidence.end(), [](const EvidenceLine& e) {
      return e.line == 2;
    })) << c.id;
  }
  // Stop 49: no table named any, so the third is another stage's best guess by the learned words
  // (stop 52: one no word of the input points at says so).
  EXPECT_NE(r.symptoms[2].id.rfind("4.", 0), 0u) << r.symptoms[2].id;
  EXPECT_NE(r.symptoms[2].basis.find("(naive Bayes, tune split)"), std::string::npos)
      << r.symptoms[2].basis;
  EXPECT_NE(r.symptoms[2].basis.find("; the tables named 0 of 3"), std::string::npos);
  EXPECT_FALSE(r.symptoms[2].evidence.empty());
  // A stage-4 candidate cites the hand-written stage words (one the learned words ranked first
  // cites those words instead: since stop 51's larger tune split, 4.3 is first on them).
  bool hand_words = false;
  for (size_t i = 0; i < 2; ++i) {
    for (const auto& e : r.symptoms[i].evidence)
      hand_words |= e.signature.rfind("stage-4 words 'iteration', 'iter', 'loss'", 0) == 0;
  }
  EXPECT_TRUE(hand_words);
  EXPECT_EQ(r.root_causes.at(0).id.rfind("R4.", 0), 0u);
  EXPECT_NE(format_result(r, tables())
                .find("Confidence: weak (no signature reached an answer; the stage is inferred "
                      "from the words shown"),
            std::string::npos);
}

TEST(TriageRanker, LauncherWordsInferTheCommunicationSetupStage) {
  const auto r =
      run("torchrun --nnodes 2 --nproc_per_node 8 train.py\n"
          "The second node never joins the rendezvous and the job fails.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
  EXPECT_EQ(r.stage, 2);
  ASSERT_EQ(r.symptoms.size(), 3u);
  EXPECT_EQ(r.symptoms[0].id, "2.1");  // the stage's most common symptom, then the others
  EXPECT_EQ(r.symptoms[1].id, "2.2");
  // Stop 49: not the stage's rare 2.3 (no tune issue) but another stage's best learned guess.
  EXPECT_NE(r.symptoms[2].id.rfind("2.", 0), 0u) << r.symptoms[2].id;
  EXPECT_NE(r.symptoms[2].basis.find("; the tables named 0 of 3"), std::string::npos);
  EXPECT_EQ(r.symptoms[0].evidence.at(0).line, 1u);
  EXPECT_EQ(r.symptoms[0].evidence.at(0).signature.rfind("stage-2 word", 0), 0u);
  EXPECT_NE(r.symptoms[0].evidence.at(0).signature.find("'torchrun'"), std::string::npos);
}

// An issue that shows only its versions and launch command is answered (weakly); a success line
// of NCCL is not a failure report.
TEST(TriageRanker, VersionsAndACommandLineAloneGetAWeakAnswer) {
  const auto r =
      run("torch version .................... 2.3.1+cu121\n"
          "deepspeed --num_gpus 4 train.py --deepspeed ds_config.json\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
  EXPECT_EQ(r.symptoms.size(), 3u);
}

TEST(TriageRanker, ASuccessLineIsNotAFailureReport) {
  EXPECT_EQ(run("NCCL INFO comm 0x556fe4c70860 rank 3 nranks 16 cudaDev 3 nvmlDev 3 - Init "
                "COMPLETE\n")
                .kind,
            Result::Kind::kNone);
}

TEST(TriageRanker, ATableAnswerIsFilledToThreeFromItsStage) {
  const auto r = run("RuntimeError: CUDA error: an illegal memory access was encountered\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kTables);
  ASSERT_EQ(r.symptoms.size(), 3u);
  EXPECT_EQ(r.symptoms[0].id, "4.3");
  EXPECT_TRUE(r.symptoms[0].basis.empty());  // the table's own
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_FALSE(r.symptoms[i].basis.empty());
    EXPECT_LT(r.symptoms[i].score, r.symptoms[0].score);
  }
  EXPECT_EQ(r.symptoms[1].id.rfind("4.", 0), 0u) << r.symptoms[1].id;
  // Stop 49: the table named one of the three; the third is another stage's learned guess.
  EXPECT_NE(r.symptoms[2].id.rfind("4.", 0), 0u) << r.symptoms[2].id;
  EXPECT_NE(r.symptoms[2].basis.find("; the tables named 1 of 3"), std::string::npos);
}

TEST(TriageRanker, FrameworkWordsWithoutAFailureWordStillDecline) {
  const auto r =
      run("Fix typo in the DeepSpeed launcher docs: torchrun is spelled torchrn twice.\n"
          "No code change; the multi-node example is unchanged.\n");
  EXPECT_EQ(r.kind, Result::Kind::kNone);
}

// Stop 48 round 2: a speed drop in prose, a run that breaks on more nodes and a loss that does
// not go down, written in Chinese, are failure reports; all three were declined before.
TEST(TriageRanker, AProseSpeedDropIsAnswered) {
  const auto r =
      run("Moving the DeepSpeed job to two nodes, samples per second drop to a third.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
}

TEST(TriageRanker, ARunThatBreaksOnASecondNodeIsAnswered) {
  const auto r =
      run("The Megatron run works on a single node but breaks when we add a second node.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.basis, Result::Basis::kInferred);
}

TEST(TriageRanker, ALossThatDoesNotDecreaseInChineseIsAnswered) {
  const auto r = run("使用 pytorch 分布式训练时，loss 一直不下降。\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
}

// Stop 60: cues.yaml's Chinese words alone (no row matches these lines): 报错 (an error
// reported) is a failure word and 加载 (load) a stage-3 word; 推理 (inference) a stage-5 word,
// 很慢 (very slow) a failure word and with 速度 (speed) 5.4's; 通信 (communication) is 4.7's.
// With stop 59's cues.yaml all three get "none".
TEST(TriageRanker, ChineseWordsNameTheStageAndTheSymptom) {
  const auto load = run("加载 checkpoint 时报错\n");
  ASSERT_EQ(load.kind, Result::Kind::kFound);
  EXPECT_EQ(load.stage, 3);
  const auto slow = run("deepspeed 推理时速度很慢，比单卡还慢。\n");
  ASSERT_EQ(slow.kind, Result::Kind::kFound);
  EXPECT_EQ(slow.stage, 5);
  ASSERT_FALSE(slow.symptoms.empty());
  EXPECT_EQ(slow.symptoms[0].id, "5.4");
  const auto comm = run("多机训练时 nccl 通信报错\n");
  ASSERT_EQ(comm.kind, Result::Kind::kFound);
  ASSERT_FALSE(comm.symptoms.empty());
  EXPECT_EQ(comm.symptoms[0].id, "4.7");
}

TEST(TriageRanker, AnUnknownSettingNamesFileLineColumnAndTheAllowedKeys) {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_triage_test_ranker." + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "cues.yaml") << "settings:\n  fill: 3\nfailure: [error]\ncontext: [nccl]\n"
                                      "stages: {2: [torchrun]}\n";
  std::ofstream(dir / "priors.yaml") << "issues: 0\n";
  std::string err = "(loaded)";
  try {
    load_ranker(dir.string(), tables().taxonomy);
  } catch (const SignatureError& e) {
    err = e.what();
  }
  EXPECT_EQ(err, dir.string() +
                     "/cues.yaml:2:3: settings: unknown key 'fill' (allowed: answer_context_only, "
                     "answer_min_words, answer_without_context, answer_without_failure_word, "
                     "co_weight, error_text_is_failure, fill_to, frames_alpha, frames_max_bytes, "
                     "frames_prior, frames_stage_weight, knn_bm25, knn_fill_weight, knn_first_min, "
                     "knn_first_sim, knn_k, knn_show, knn_stage_centred, knn_stage_weight, "
                     "learned_stage_weight, "
                     "min_share, nb_alpha, nb_cross_min, nb_cross_tables_max, nb_fill_weight, "
                     "nb_max_bytes, nb_mix_power, nb_root_cause_weight, nb_stage_weight, "
                     "reinfer_below, root_cause_table_weight, stage_prior_weight, study_weight, "
                     "symptom_word_weight, table_stage_weight, weak_margin, weak_margin_slot, "
                     "weak_nb_order_min, weak_nb_thin)");
}

TEST(TriageBadInput, EmptyInputSaysNoSignatureFound) {
  const auto r = run("  \n\n");
  EXPECT_EQ(r.kind, Result::Kind::kEmpty);
  EXPECT_EQ(format_result(r, tables()),
            "no distributed-failure signature found: the input is empty\n");
}

TEST(TriageBadInput, BinaryInputIsNamedBinary) {
  std::string bin =
      "\x7f"
      "ELF";
  bin += std::string(100, '\0');
  const auto r = run(bin);
  EXPECT_EQ(r.kind, Result::Kind::kBinary);
  EXPECT_EQ(format_result(r, tables()),
            "no distributed-failure signature found: the input is binary (100 NUL bytes in its "
            "first 104 bytes)\n");
}

TEST(TriageBadInput, ADocsTypoIssueHasNoSignature) {
  const auto r =
      run("Fix typo in docs/getting-started.md\n"
          "The sentence \"the the launcher reads the hostfile\" repeats a word.\n"
          "This PR removes the duplicate word. No code change.\n");
  EXPECT_EQ(r.kind, Result::Kind::kNone);
  EXPECT_EQ(format_result(r, tables())
                .rfind("no distributed-failure signature found: no signature "
                       "matched\nWhat it read:\n",
                       0),
            0u);
}

TEST(TriageBadInput, TextInAnotherLanguageWithoutErrorsHasNoSignature) {
  EXPECT_EQ(run("请问如何在多机上使用这个框架？谢谢。\n文档里没有写。\n").kind,
            Result::Kind::kNone);
}

TEST(TriageBadInput, AFiftyMegabyteLogCompletesAndIsReadFromItsTail) {
  std::string log;
  log.reserve(52u << 20);
  // DeepSpeed's and Megatron-LM's step lines: every line holds needles of prose rows (`loss`,
  // `time`, `grad`, `norm`), whose regexes then run on most lines.
  for (int i = 0; log.size() < (50u << 20); ++i) {
    const std::string n = std::to_string(i);
    log += i % 2 ? "[2024-01-01 10:00:00," + std::to_string(i % 1000) +
                       "] [INFO] [logging.py:96:log_dist] [Rank 0] step=" + n +
                       ", skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]\n"
                 : " iteration " + n + "/ 500000 | consumed samples: " + n +
                       "00 | elapsed time per iteration (ms): 1234." + std::to_string(i % 10) +
                       " | lm loss: 6." + std::to_string(i % 97) +
                       "E+00 | loss scale: 65536.0 | grad norm: 1." + std::to_string(i % 89) +
                       " | number of skipped iterations: 0 | number of nan iterations: 0 |\n";
  }
  log += "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
  const auto t0 = std::chrono::steady_clock::now();
  std::istringstream in(log);
  const auto input = read_input(in, 16u << 20);
  const auto r = triage(input, tables());
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
  std::printf("50 MiB log: %.0f ms (read %zu of %zu bytes)\n", ms.count(), input.text.size(),
              input.original_bytes);
  EXPECT_TRUE(input.truncated);
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "4.2");
}

// A row's regex runs on the last `max_regex_lines` lines that hold its needle (a log's errors are
// at its tail): a match among them is found, one before them is not tried.
TEST(TriageBadInput, ARowsRegexRunsOnlyOnTheLastLinesHoldingItsNeedle) {
  const auto dir = write_table("regex_cap", R"(signatures:
  - id: loss-spike
    needle: "loss"
    regex: 'loss spikes'
    symptoms: {"4.4": 3}
)");
  // The tables alone: since stop 50 the ranker answers a loss spike without context weakly
  // (answer_without_context), and this test is about the row's regex.
  const Tables t = load_tables(dir, default_taxonomy_path(), "none");
  auto scan = [&](const std::string& text, size_t cap) {
    std::istringstream in(text);
    Options o;
    o.max_regex_lines = cap;
    return triage(read_input(in, 1u << 20), t, o).kind;
  };
  const std::string plain = "step 1 loss 0.5\nstep 2 loss 0.4\nstep 3 loss 0.3\n";
  EXPECT_EQ(scan("step 0 loss spikes to 40\n" + plain, 4000), Result::Kind::kFound);
  EXPECT_EQ(scan("step 0 loss spikes to 40\n" + plain, 3), Result::Kind::kNone);
  EXPECT_EQ(scan(plain + "step 4 loss spikes to 40\n", 2), Result::Kind::kFound);
}

// A row of ordinary words reads a line with its paths masked, as fl-detect-logs does: a
// directory named after an OOM or a hang is no OOM or hang (it was: `oom-statement` read
// `/data/oom-killer-repro/` as 4.2, `prep-oom-title` as 3.4, `hang-statement`
// `/scratch/nccl-hang-debug/` as 4.11). The shipped tables alone: the ranker's cue words still
// read the raw line (docs/triage-history.md, Stop 50).
TEST(TriagePaths, AWordThatSitsOnlyInAPathIsNoAnswer) {
  static const Tables t = load_tables(default_signature_dir(), default_taxonomy_path(), "none");
  std::istringstream in(
      "Loading checkpoint from /data/oom-killer-repro/global_step400\n"
      "Saving logs to /scratch/nccl-hang-debug/rank0.log\n");
  const auto r = triage(read_input(in, 1u << 20), t);
  EXPECT_EQ(r.kind, Result::Kind::kNone);
  for (const auto& c : r.symptoms) {
    EXPECT_TRUE(c.id != "4.2" && c.id != "3.4" && c.id != "4.11")
        << c.id << " from " << c.evidence.at(0).signature << ": " << c.evidence.at(0).text;
  }
}

// A row keyed on a traceback path still reads it, and the words of the path's directories are
// still no OOM.
TEST(TriagePaths, ARowKeyedOnATracebackPathStillReadsItsPath) {
  const auto r =
      run("  File \"/home/u/oom-repro/env/lib/python3.10/site-packages/torch/utils/"
          "cpp_extension.py\", line 1900, in _run_ninja_build\n"
          "RuntimeError: Error building extension 'fused_adam'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.symptoms.at(0).id, "1.1");
  EXPECT_EQ(r.symptoms.at(0).evidence.at(0).line, 1u);
  for (const auto& c : r.symptoms) EXPECT_NE(c.id, "4.2") << c.evidence.at(0).signature;
}

// The rule on a table of two rows: the one keyed on a file name reads the raw line, the one of
// ordinary words the masked line (its word outside the path still counts).
TEST(TriagePaths, APathRowReadsTheRawLineAndAWordRowTheMaskedOne) {
  const auto dir = write_table("path_rows", R"(signatures:
  - id: oom-word
    needle: "oom"
    icase: true
    regex: '\boom\b'
    symptoms: {"4.2": 2}
  - id: oom-frame
    needle: "oom_repro.py"
    regex: 'oom_repro\.py", line \d+'
    symptoms: {"4.3": 2}
)");
  const Tables t = load_tables(dir, default_taxonomy_path(), "none");
  std::istringstream in(
      "  File \"/data/oom/oom_repro.py\", line 12, in main\n"
      "the job hit an OOM at step 400 under /data/oom/\n");
  const auto r = triage(read_input(in, 1u << 20), t);
  ASSERT_EQ(r.symptoms.size(), 2u);
  for (const auto& c : r.symptoms) {
    ASSERT_EQ(c.evidence.size(), 1u) << c.id;
    EXPECT_EQ(c.evidence[0].line, c.id == "4.3" ? 1u : 2u) << c.id;
  }
}

TEST(TriagePaths, RowsKeyedOnPathsAndFileNamesAreTold) {
  EXPECT_TRUE(reads_paths("cpp_extension", "torch/utils/cpp_extension\\.py"));
  EXPECT_TRUE(reads_paths("nccl error in:", "NCCL error in: \\S*ProcessGroupNCCL\\.cpp:\\d+"));
  EXPECT_TRUE(reads_paths("undefined symbol", "\\.so: undefined symbol: \\S+"));
  EXPECT_TRUE(reads_paths("only", "tokens?/s"));  // `tokens/s` is masked as a path
  EXPECT_TRUE(reads_paths("frame", "colossalai[\\\\]lazy"));
  EXPECT_TRUE(reads_paths("_document", "\\w_text_document\\b"));
  EXPECT_TRUE(reads_paths("ds_config.json", "ds_config\\.json"));
  EXPECT_TRUE(reads_paths("zero", "_save_zero_checkpoint|zero_to_fp32"));  // code names
  EXPECT_FALSE(reads_paths("oom", "\\bOOM\\b"));
  EXPECT_FALSE(reads_paths("half", "model\\.half\\(\\)|\\.cuda\\(\\)"));
  EXPECT_FALSE(reads_paths("out of memory", "CUDA out of memory"));
}

// Triage masks file paths, not words joined by a '/': an issue's `hangs/crashes` and NCCL's
// `via P2P/direct pointer` are read as before.
TEST(TriagePaths, WordsJoinedByASlashAreNoFilePath) {
  EXPECT_EQ(mask_file_paths("training hangs/crashes via P2P/direct pointer, NET/IB, 1/3 and/or"),
            "training hangs/crashes via P2P/direct pointer, NET/IB, 1/3 and/or");
  EXPECT_EQ(mask_file_paths("from /data/oom-x/s4 ./oom.sh runs/oom/ tools/oom.py --o=/a/b:"),
            "from <path> <path> <path> <path> --o=<path>:");
  EXPECT_EQ(mask_file_paths("see https://github.com/x and ~/oom-logs"), "see <path> and <path>");
}

}  // namespace
}  // namespace fl::triage
