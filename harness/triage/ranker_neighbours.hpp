// The nearest labelled tune issues of `faultline triage` (stop 53): an input's words compared with
// every issue of harness/triage/ranker/neighbours.jsonl (learn_neighbours.py writes it from the
// tune split: each issue's labels and its distinct words, no line of it). The nearest ones are
// shown as evidence ("similar labelled issues"), and their labels, weighted by similarity, vote
// for the stage and the symptoms of a weak answer where cues.yaml's knn_* settings are on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "harness/triage/ranker_words.hpp"

namespace fl::triage {

struct Taxonomy;
struct Candidate;
struct EvidenceLine;
struct Result;
struct Ranker;
struct RankInput;

// One labelled tune issue of the file.
struct NeighbourIssue {
  std::string id, url, summary;
  std::vector<std::string> symptoms;  // the first is the primary one; ["none"]: a non-failure
  int stage = 0;
  std::string root_cause;       // "R4.6", or "none"
  std::vector<uint32_t> words;  // indexes into NeighbourModel::vocab_words, distinct
  double norm = 0;              // the length of its idf-weighted vector (the cosine)
};

struct NeighbourModel {
  bool loaded = false;
  std::vector<NeighbourIssue> issues;
  std::unordered_map<std::string, uint32_t> vocab;  // word -> index
  std::vector<std::string> vocab_words;
  std::vector<double> idf;                      // ln((N + 1) / (df + 1)) + 1
  std::vector<double> bm25_idf;                 // ln(1 + (N - df + 0.5) / (df + 0.5))
  std::vector<std::vector<uint32_t>> postings;  // word -> the issues that hold it
  double mean_words = 0;                        // BM25's average document length
  std::map<std::string, double> stage_share;    // stage ("4") -> its share of the issues
};

// Reads `file` into `m` (a missing file leaves m.loaded false); a bad line throws SignatureError
// "file:line: key: problem". Labels are checked against the taxonomy.
void load_neighbours(const std::string& file, const Taxonomy& t, NeighbourModel& m);

// The distinct words of the first `max_bytes` of `text` that the file holds, tokenised as
// learn_tokens.py does, each with its first line.
std::vector<WordHit> neighbour_words(std::string_view text, const NeighbourModel& m,
                                     size_t max_bytes);

// A labelled tune issue near the input, as the report shows it (`issue` points into the Tables'
// model, which outlives every Result made with it).
struct SimilarIssue {
  const NeighbourIssue* issue = nullptr;
  double similarity = 0;
  std::vector<std::string> shared;  // the shared words, the rarest first (at most 5)
};

// The `k` issues nearest `words` (cosine of idf-weighted binary vectors; BM25 with `bm25`), best
// first (ties: file order), the issue `skip_id` left out (--eval: an issue is never its own).
std::vector<SimilarIssue> nearest_issues(const NeighbourModel& m, const std::vector<WordHit>& words,
                                         size_t k, bool bm25, const std::string& skip_id);

// The neighbours' labels as similarity-weighted shares: stage ("4") and symptom (a secondary
// label counts half) -> the sum of the similarities of the issues carrying it over the sum of all
// (non-failures count in the sum and vote for nothing).
struct NeighbourVotes {
  std::map<std::string, double> stage, symptom;
  std::vector<SimilarIssue> voters;
  std::vector<WordHit> words;  // the input's words (their lines are the votes' evidence)
};
NeighbourVotes neighbour_votes(const std::vector<SimilarIssue>& nearest, size_t k);

// A symptom's share of the votes among the symptoms of `stage` (0 when no voter has that stage).
double stage_symptom_vote(const NeighbourVotes& v, const std::string& id, int stage);

// How a candidate the votes carried says so: "similar labelled issues X (0.41), Y (0.33) carry
// it: vote 0.62".
std::string vote_basis(const NeighbourVotes& v, const std::string& id, double share);

// The input's lines that hold the words it shares with the voters carrying `id`, at most `n`.
std::vector<EvidenceLine> vote_evidence(const NeighbourVotes& v, const std::string& id, size_t n);

// Stop 53 (knn_first_min): when the votes give one symptom at least `min_share`, it takes the first
// slot of a weak answer (moved up, or a new candidate); true when it moved one. `fill_to` caps.
// knn_first_sim (`min_sim` > 0): when the nearest issue is at least that similar, its primary
// symptom takes the first slot so.
bool vote_first(Result& r, const NeighbourVotes& v, double min_share, double min_sim, int fill_to);

// The report's lines of `similar`: "Similar labelled issues ..." and one entry per issue; "" when
// there is none.
std::string format_similar(const std::vector<SimilarIssue>& similar);

// What apply_ranker asks first: the input's nearest tune issues (knn_show of them into r.similar,
// the knn_k nearest's votes into in.knn), when the file is loaded and either setting is above 0.
void find_neighbours(Result& r, RankInput& in, const Ranker& k);

}  // namespace fl::triage
