// Stop 52: how a weak answer (no table row reached the threshold, the stage inferred) is composed.
// cues.yaml's weak_* settings hedge it across stages; each test runs one text with a setting off
// and on, over a copy of the shipped ranker folder, and checks what the setting moves and that
// the moved candidate names the lines that carried it.
#include "harness/triage/report_json.hpp"
#include "harness/triage/triage.hpp"
#include "tests/support/scratch.hpp"
#include "tests/triage/tables.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

// A copy of the shipped ranker folder with `settings` set in cues.yaml (each "key: value" line
// replaced) and `words` as words.yaml ("": the shipped one).
Tables tables_with(const std::string& name,
                   const std::vector<std::pair<std::string, std::string>>& settings,
                   const std::string& words = "") {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_weak_answer_test_" + name + "." + std::to_string(getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"cues.yaml", "priors.yaml", "words.yaml"}) {
    fs::copy_file(fs::path(default_ranker_dir()) / f, dir / f);
  }
  if (!words.empty()) std::ofstream(dir / "words.yaml", std::ios::trunc) << words;
  std::ifstream in(dir / "cues.yaml");
  std::string cues((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [key, value] : settings) {
    const size_t at = cues.find("\n  " + key + ":");
    EXPECT_NE(at, std::string::npos) << key << " is not in cues.yaml";
    if (at == std::string::npos) continue;
    const size_t end = cues.find('\n', at + 1);
    cues.replace(at + 1, end - at - 1, "  " + key + ": " + value);
  }
  std::ofstream(dir / "cues.yaml", std::ios::trunc) << cues;
  return load_tables(default_signature_dir(), default_taxonomy_path(), dir.string());
}

Result run(const std::string& text, const Tables& t) {
  return triage(Input{text, false, text.size()}, t);
}

int stage_of(const Candidate& c) {
  return c.id.empty() ? 0 : c.id[0] - '0';
}

// A training report that also names its launch (torchrun, nodes, rendezvous: set-up words): no
// table row fires, stage 4 is inferred and stage 2 scores next to it.
const char* kNearTie =
    "deepspeed training with torchrun on 2 nodes: the backward pass gives a wrong gradient at "
    "step 20, the rendezvous printed nothing\n";

TEST(TriageWeakAnswer, ARunnerUpStageWithinTheMarginTakesItsSlot) {
  const auto off =
      run(kNearTie, tables_with("margin_off", {{"weak_margin", "-1"}}, test::kServeWords));
  const auto on =
      run(kNearTie, tables_with("margin_on", {{"weak_margin", "100"}, {"weak_margin_slot", "2"}},
                                test::kServeWords));
  ASSERT_EQ(off.kind, Result::Kind::kFound);
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  ASSERT_EQ(on.basis, Result::Basis::kInferred);
  ASSERT_GE(off.symptoms.size(), 3u);
  ASSERT_GE(on.symptoms.size(), 3u);
  EXPECT_EQ(on.stage, off.stage);  // the answer's stage and first slot stay
  EXPECT_EQ(on.symptoms[0].id, off.symptoms[0].id);
  EXPECT_EQ(stage_of(off.symptoms[1]), off.stage);  // without the margin: the stage's own second
  const Candidate& c = on.symptoms[1];
  EXPECT_NE(stage_of(c), on.stage);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(stage_of(off.symptoms[i]), stage_of(c)) << i;
  const std::string says = "stage " + std::to_string(stage_of(c)) + " scores within ";
  EXPECT_NE(c.basis.find(says), std::string::npos) << c.basis;
  EXPECT_NE(c.basis.find("(cues.yaml weak_margin)"), std::string::npos) << c.basis;
  ASSERT_FALSE(c.evidence.empty());  // the lines behind the runner-up stage
  for (const auto& e : c.evidence) EXPECT_FALSE(e.text.empty());
  EXPECT_EQ(on.symptoms.size(), off.symptoms.size());
}

TEST(TriageWeakAnswer, ARunnerUpStageOutsideTheMarginChangesNothing) {
  const auto off =
      run(kNearTie, tables_with("margin_off2", {{"weak_margin", "-1"}}, test::kServeWords));
  const auto on = run(kNearTie, tables_with("margin_0", {{"weak_margin", "0"}}, test::kServeWords));
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  ASSERT_EQ(on.symptoms.size(), off.symptoms.size());
  for (size_t i = 0; i < on.symptoms.size(); ++i) EXPECT_EQ(on.symptoms[i].id, off.symptoms[i].id);
}

// Stage-4 words infer stage 4; the learned words are sure of a stage-5 symptom.
const char* kSureWords =
    "deepspeed training with 8 GPUs: the optimizer step gives a wrong loss at iteration 20\n"
    "quuxserve quuxreply\n";

TEST(TriageWeakAnswer, SureLearnedWordsPutTheirSymptomFirst) {
  const auto off =
      run(kSureWords, tables_with("sure_off", {{"weak_nb_order_min", "0"}}, test::kServeWords));
  const auto on =
      run(kSureWords, tables_with("sure_on", {{"weak_nb_order_min", "0.8"}, {"weak_nb_thin", "-1"}},
                                  test::kServeWords));
  ASSERT_EQ(off.kind, Result::Kind::kFound);
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  EXPECT_EQ(off.stage, 4);
  ASSERT_FALSE(off.symptoms.empty());
  EXPECT_NE(off.symptoms[0].id, "5.1");
  ASSERT_FALSE(on.symptoms.empty());
  EXPECT_EQ(on.symptoms[0].id, "5.1");
  EXPECT_EQ(on.stage, 5);  // the answer's stage is its first slot's
  const Candidate& c = on.symptoms[0];
  EXPECT_EQ(c.basis.rfind("learned words 'quuxserve', 'quuxreply' (naive Bayes, tune split)", 0),
            0u)
      << c.basis;
  ASSERT_FALSE(c.evidence.empty());
  EXPECT_EQ(c.evidence[0].line, 2u);
  ASSERT_FALSE(on.root_causes.empty());
  EXPECT_EQ(on.root_causes[0].id.rfind("R5.", 0), 0u);  // the root cause follows the stage
}

TEST(TriageWeakAnswer, SureWordsLeaveAStageWithItsOwnEvidenceAlone) {
  // weak_nb_thin 0: the inferred stage has words of its own, so the words do not reorder it.
  const auto on = run(
      kSureWords, tables_with("sure_thin", {{"weak_nb_order_min", "0.8"}, {"weak_nb_thin", "0"}},
                              test::kServeWords));
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  EXPECT_EQ(on.stage, 4);
  ASSERT_FALSE(on.symptoms.empty());
  EXPECT_NE(on.symptoms[0].id, "5.1");
}

// Stop 49's last slot takes another stage's best P(symptom | words) whatever its value; where no
// word of the input points at it, the candidate says so and shows the lines the answer rests on.
TEST(TriageWeakAnswer, AGuessNoWordPointsAtStillNamesLines) {
  const std::string text =
      "deepspeed training with 8 GPUs: the optimizer step gives a wrong loss at iteration 20\n";
  const auto r = run(text, tables_with("no_word", {}, test::kServeWords));
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  ASSERT_EQ(r.basis, Result::Basis::kInferred);
  ASSERT_GE(r.symptoms.size(), 3u);
  for (const Candidate& c : r.symptoms) EXPECT_FALSE(c.evidence.empty()) << c.id << ": " << c.basis;
  const Candidate& c = r.symptoms[2];
  EXPECT_EQ(c.id, "5.1");  // the words' only other-stage symptom; no word of the text is theirs
  EXPECT_EQ(c.basis.find("learned words ''"), std::string::npos) << c.basis;
  EXPECT_EQ(c.basis.rfind("no learned word of the input points at it", 0), 0u) << c.basis;
  ASSERT_FALSE(c.evidence.empty());
  EXPECT_EQ(c.evidence[0].line, 1u);
}

// Stop 59: a table answer under reinfer_below has its stage inferred. The one row this text
// matches is hang-statement (4.11, 1.6, a stage-4 default), while its words are a build's.
const char* kBuildHang =
    "the wheel build hangs: nvcc and ninja keep compiling the extension after pip install\n";

TEST(TriageWeakAnswer, WordsOfAnotherStageOverruleAGenericTableAnswer) {
  const auto off = run(kBuildHang, tables_with("reinfer_off", {{"reinfer_below", "0"}}));
  const auto on = run(kBuildHang, tables_with("reinfer_on", {{"reinfer_below", "4"}}));
  ASSERT_EQ(off.kind, Result::Kind::kFound);
  ASSERT_FALSE(off.symptoms.empty());
  EXPECT_EQ(off.stage, 4);
  EXPECT_EQ(off.symptoms[0].id, "4.11");
  EXPECT_NE(off.basis, Result::Basis::kInferred);
  EXPECT_TRUE(off.overruled.empty());

  ASSERT_EQ(on.kind, Result::Kind::kFound);
  EXPECT_EQ(on.basis, Result::Basis::kInferred);
  EXPECT_EQ(on.stage, 1);
  ASSERT_FALSE(on.symptoms.empty());
  EXPECT_EQ(stage_of(on.symptoms[0]), 1);
  EXPECT_EQ(on.overruled, "4.11 at 1.60 (stage 4)");
  for (const Candidate& c : on.symptoms) {  // the overruled stage's table candidates are gone
    if (stage_of(c) == 4) EXPECT_FALSE(c.basis.empty()) << c.id << " is still the tables'";
  }
  for (const Candidate& c : on.root_causes) EXPECT_EQ(c.id.rfind("R1.", 0), 0u) << c.id;
  ASSERT_FALSE(on.root_causes.empty());
  EXPECT_EQ(on.root_causes[0].id.rfind("R1.", 0), 0u);  // the root cause follows the stage
  const Tables t = tables_with("reinfer_on2", {});
  const auto j = result_json(on, t, Input{kBuildHang, false, 0}, "issue.txt");
  EXPECT_EQ(j.at("basis"), "inferred");
  EXPECT_EQ(j.at("overruled"), "4.11 at 1.60 (stage 4)");
  EXPECT_TRUE(
      result_json(off, t, Input{kBuildHang, false, 0}, "issue.txt").at("overruled").is_null());
  const std::string report = format_result(on, t);
  EXPECT_NE(report.find("Confidence: weak (the tables' best match, 4.11 at 1.60 (stage 4), is "
                        "under cues.yaml's reinfer_below, and the words shown put the issue in "
                        "stage 1;"),
            std::string::npos)
      << report;
}

TEST(TriageWeakAnswer, ATableAnswerAtOrAboveReinferBelowKeepsItsStage) {
  // hang-statement scores 1.6: a threshold at it leaves the answer as the tables gave it.
  const auto r = run(kBuildHang, tables_with("reinfer_at", {{"reinfer_below", "1.6"}}));
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.11");
  EXPECT_TRUE(r.overruled.empty());
}

TEST(TriageWeakAnswer, AnAnswerWithAnUnmarkedRowBehindItKeepsItsStage) {
  // py-spy-dump (4.11, 1.5) is not marked: the same build words, but part of the score comes
  // from a row whose stage is not a default, so the tables' stage stands (1.6 + 1.5 < 4).
  const std::string text = std::string(kBuildHang) + "py-spy dump of the process\n";
  const auto r = run(text, tables_with("reinfer_mixed", {{"reinfer_below", "4"}}));
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.11");
  EXPECT_LT(r.symptoms[0].score, 4);
  EXPECT_GT(r.symptoms[0].reinfer_score, 0);
  EXPECT_LT(r.symptoms[0].reinfer_score, r.symptoms[0].score);
  EXPECT_TRUE(r.overruled.empty());
}

TEST(TriageWeakAnswer, WordsOfTheTablesOwnStageLeaveItsAnswerAsItWas) {
  const std::string text = "training hangs at iteration 200 after the loss and the backward pass\n";
  const auto off = run(text, tables_with("reinfer_same_off", {{"reinfer_below", "0"}}));
  const auto on = run(text, tables_with("reinfer_same_on", {{"reinfer_below", "4"}}));
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  EXPECT_EQ(on.stage, 4);
  EXPECT_EQ(on.basis, off.basis);
  EXPECT_TRUE(on.overruled.empty());
  ASSERT_EQ(on.symptoms.size(), off.symptoms.size());
  for (size_t i = 0; i < on.symptoms.size(); ++i) EXPECT_EQ(on.symptoms[i].id, off.symptoms[i].id);
}

}  // namespace
}  // namespace fl::triage
