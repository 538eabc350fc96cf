// The ranker of `faultline triage` (issue 34): what it does where the signature tables are thin.
// The tables name one or two symptoms for what they were written for, and nothing for a failure
// told in prose. When the text is about a distributed-training failure (a failure word and a
// framework, launcher or table match), the ranker infers the stage (the tables' answer, else stage
// words such as "rendezvous" or "backward") and fills the candidates to three with that stage's
// symptoms, in the order of how often they go with the top symptom and occur in that stage on the
// corpus's tune split; the root cause follows the chosen symptom. Every filled candidate names the
// lines and the count it rests on.
//
// Its data, not code: harness/triage/ranker/cues.yaml (hand-written words and settings) and
// priors.yaml (counted from the tune split by harness/triage/learn_ranker.py).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "harness/triage/ranker_frames.hpp"
#include "harness/triage/ranker_neighbours.hpp"
#include "harness/triage/ranker_words.hpp"

namespace fl::triage {

struct Taxonomy;

// A word of cues.yaml: matched case-insensitively at the start of a word ("compil" also finds
// "compilation"), or anywhere when written with a leading '*' ("*error" finds "RuntimeError").
// priors.yaml's stage_words are cues too, with their learned weights.
struct Cue {
  // kHealthy: a word of a text that is not a failure report (a question, a request, a success
  // line); it stops an answer on context lines alone.
  // kSymptom: a word that points at one symptom of a stage (cues.yaml symptom_words); it orders
  // the stage's symptoms when the ranker fills the candidates.
  enum class Kind { kFailure, kContext, kStage, kHealthy, kSymptom } kind = Kind::kStage;
  std::string word;  // lower-cased
  bool anywhere = false;
  bool whole = false;   // a whole word only (priors.yaml's learned words are whole tokens)
  int stage = 0;        // kStage: the stage it points at
  std::string symptom;  // kSymptom: the symptom it points at
  double weight = 1.0;
};

// Tallies of the tune split (priors.yaml): label -> label -> count.
using Counts = std::map<std::string, std::map<std::string, double>>;

struct Ranker {
  bool enabled = false;  // false: the tables alone answer (--ranker none)
  std::vector<Cue> cues;
  // settings: of cues.yaml
  int fill_to = 3;                  // candidates to reach when the text has failure context
  double table_stage_weight = 1.0;  // a table symptom's score adds this much to its stage's words
  double co_weight = 1.0;           // co-occurrence with the top symptom, against the stage prior
  // Pseudo-issues spread by the study's shares (taxonomy.yaml) over a stage's tally: it orders
  // symptoms the tune split lacks, and with more weight it leans the order towards the study.
  double study_weight = 1.0;
  double learned_stage_weight = 1.0;  // scales priors.yaml's stage_words (0: hand words only)
  // A stage's symptom under this share of its issues is not filled in; the runner-up stage's
  // common symptoms come instead (stages 1 and 2 have two common symptoms, not three).
  double min_share = 0.0;
  // What lets the ranker answer where the tables did not: a failure word is always needed unless
  // this is true, when a table's error text below the threshold also counts as one.
  bool error_text_is_failure = false;
  // The text needs no failure word at all when it has table or environment matches (an issue
  // that shows only its versions and command line), no healthy word, and no error text the tables
  // judged below their threshold (a benign log line such as a loss-scale OVERFLOW), if true.
  bool answer_context_only = false;
  // Markers of a log's notice line (`nccl info`, `[warning]`, lower-case): a failure word on a
  // line holding one (`NCCL INFO NET/Plugin: Failed to find ...`) is not a failure word.
  std::vector<std::string> notice;
  // Stop 50: the answer gate relaxed, each opening its own switch. answer_without_context: a
  // failure word without any context (no table match, no context word) is answered.
  // answer_without_failure_word: context (a table match, even one with error text below the
  // threshold, or a context word) without a failure word or a healthy word is answered. Either
  // needs answer_min_words learned words (words.yaml) that lean the inferred stage (0: none).
  bool answer_without_context = false;
  bool answer_without_failure_word = false;
  int answer_min_words = 0;
  // A root cause's score: this times its table score (over the best table score), plus how often
  // it goes with the top symptom on the tune split. Large: the tables' order; small: the tally's.
  double root_cause_table_weight = 10.0;
  // The inferred stage leans towards the stages with more tune failures: each stage's score gets
  // this times ln((its failures + 1) / (the largest stage's + 1)). 0: the prior only breaks ties.
  double stage_prior_weight = 0.0;
  // A symptom's filling score gets this much per word of it (symptom_words) found in the text.
  double symptom_word_weight = 0.0;
  // The learned word ranker (words.yaml, stop 48): add-alpha smoothing of its naive Bayes; the
  // inferred stage's score gets nb_stage_weight times P(stage | words); a filled symptom's score
  // gets nb_fill_weight times P(symptom | words) within its stage; the words are read from the
  // input's first nb_max_bytes only (a 50 MiB log costs the same as a short issue).
  double nb_alpha = 1.0;
  double nb_stage_weight = 0.0;
  double nb_fill_weight = 0.0;
  double nb_cross_min = 0.0;  // another stage's symptom with P(symptom | words) >= this: 3rd slot
  // Stop 49: when the tables named at most this many of the candidates (-1: off) and the three are
  // all of the answer's stage, the last slot goes to another stage's symptom with the highest
  // P(symptom | words), whatever its value.
  int nb_cross_tables_max = -1;
  // Stop 49: a root cause's score gets this times P(root cause | words) among the answer's stage's
  // root causes (words.yaml word_root_causes), next to the tables' weight and the symptom's tally.
  double nb_root_cause_weight = 0.0;
  int nb_max_bytes = 65536;
  // Stop 53: a kind words.yaml scores as the mix of the naive Bayes and a logistic regression
  // (stop 52) has its posterior raised to this power and normalised again (1: as it is; above 1
  // as sharp as the naive Bayes's alone, so that nb_cross_min and weak_nb_order_min keep their
  // meaning). A kind of the naive Bayes alone is left as it is.
  double nb_mix_power = 1.0;
  // Stop 52: how a weak answer (an inferred stage) is composed; each off by default.
  // weak_margin >= 0: when the runner-up stage's score (words, tables, learned words, prior) is
  // within this of the inferred stage's, its best symptom takes slot weak_margin_slot (1-based).
  double weak_margin = -1;
  int weak_margin_slot = 3;
  // weak_nb_order_min > 0: when P(symptom | words) over all symptoms reaches this for one symptom
  // and the inferred stage's own score (its words and table matches) is at most weak_nb_thin
  // (< 0: any), the learned words order the slots.
  double weak_nb_order_min = 0;
  double weak_nb_thin = -1;
  // Stop 59: a table answer whose top symptom's score came only from rows marked `reinfer` and is
  // below reinfer_below (0: off) has its stage inferred as a weak answer's is (its table matches
  // count towards their stages); when another stage wins, only that stage's table candidates and
  // root causes stay and the answer is filled as inferred.
  double reinfer_below = 0;
  // Stop 53: the nearest labelled tune issues (neighbours.jsonl, ranker_neighbours.hpp). knn_show
  // of them are shown (0: none); the knn_k nearest vote, weighted by similarity: a weak answer's
  // inferred stage gets knn_stage_weight times its stage's vote, a filled symptom knn_fill_weight
  // times its vote within its stage, and one symptom with a vote of at least knn_first_min (> 0)
  // takes the first slot. knn_bm25: BM25 instead of the cosine. Each weight 0: off.
  int knn_show = 3;
  int knn_k = 10;
  double knn_stage_weight = 0;
  double knn_fill_weight = 0;
  double knn_first_min = 0;
  double knn_first_sim = 0;  // the nearest issue at least this similar: its symptom first
  bool knn_bm25 = false;
  bool knn_stage_centred = false;  // the stage vote less the stage's share of the file's issues
  NeighbourModel neighbours;
  WordModel words;
  // Stop 53: traceback frames (frames.yaml, ranker_frames.hpp). An inferred stage's score gets
  // frames_stage_weight times P(stage | frames) (0: off); add-frames_alpha smoothing; the frames
  // are read from the input's last frames_max_bytes.
  double frames_stage_weight = 0;
  double frames_alpha = 1.0;
  bool frames_prior = false;  // the naive Bayes's prior: the stages' shares (true) or flat
  int frames_max_bytes = 65536;
  FrameModel frames;
  // priors: of priors.yaml
  int issues = 0;
  std::map<std::string, double> share;  // the taxonomy's shares (load_ranker copies them)
  Counts stage_symptoms;                // "4" -> {"4.11": 13, ...}: primary symptoms per stage
  Counts co_occurrence;                 // "4.11" -> {"4.7": 5}: symptoms labelled together with it
  Counts symptom_root_causes;  // "4.11" -> {"R4.6": 5, ...}: root causes of a primary symptom
  Counts stage_root_causes;    // "4" -> {"R4.4": 17, ...}
};

// cues.yaml and priors.yaml of `dir`; throws SignatureError ("file:line:col: key: problem").
Ranker load_ranker(const std::string& dir, const Taxonomy& t);
// $FAULTLINE_TRIAGE_RANKER, else the source tree's harness/triage/ranker.
std::string default_ranker_dir();

struct Result;
struct Tables;

// A cue word found on a line of the input.
struct CueHit {
  size_t cue = 0, line = 0;  // index into Ranker::cues; 1-based line
  std::string text;
};

// What the ranker reads besides the tables' answer.
struct RankInput {
  std::vector<CueHit> cues;
  bool table_match = false;  // a table row (signature or environment rule) matched a line
  bool error_text = false;   // a non-env signature matched a line
  std::string_view text;     // the input (the word ranker reads its first nb_max_bytes)
  std::string self_id;       // --eval: the issue's own id, never its own neighbour
  NeighbourVotes knn;        // apply_ranker fills it: the nearest tune issues' votes
};

// After the tables' tiers (`r` as they left it): fills the candidates to `fill_to` and picks the
// root cause; and when the tables found nothing but the text has failure words (or error text) and
// distributed context (a table row matched, or a context word), answers with the inferred
// stage's symptoms (Result::Basis::kInferred); the answer_without_* settings relax that gate
// (stop 50). Empty and binary input, and text the gate keeps out, are left as they are.
void apply_ranker(Result& r, const RankInput& in, const Tables& t);

}  // namespace fl::triage
