// The learned word ranker of `faultline triage` (stop 48): a multinomial naive Bayes over the
// words of the input, from counts that harness/triage/learn_ranker.py makes on the corpus's tune
// split (harness/triage/ranker/words.yaml). The ranker uses its posteriors to lean the inferred
// stage and to order the symptoms it fills in; every candidate it moves names the words that
// carried it and their lines.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fl::triage {

struct Taxonomy;

// What a posterior is over: symptom ids ("4.11"), stages ("4") or root-cause ids ("R4.6").
enum class WordLabel { kSymptom, kStage, kRootCause };

// words.yaml: label -> failures, and word -> label -> failures holding the word, for each kind of
// label (index: WordLabel). Root causes (stop 49) are optional: a file without them has none.
struct WordModel {
  bool loaded = false;
  int issues = 0;
  std::map<std::string, double> classes[3];  // failures per label (secondary symptoms 0.5)
  std::unordered_map<std::string, std::map<std::string, double>> rows[3];  // word -> label -> n
  std::map<std::string, double> sums[3];  // per label: the sum over words
  // Stop 52: a multinomial logistic regression of a kind's labels on the same words (words.yaml
  // logistic_bias and logistic_<kind>). A kind that has it gets the mean of the naive Bayes's
  // posterior and the regression's, softmax over the labels of bias + the input's words' weights.
  std::map<std::string, double> bias[3];                                      // label -> bias
  std::unordered_map<std::string, std::map<std::string, double>> weights[3];  // word -> label -> w
};

// Reads `file` into `m` (a missing file leaves m.loaded false); throws SignatureError. The shape
// learn_ranker.py writes is read line by line (load_generated_word_model), anything else by
// yaml-cpp (load_word_model_yaml); both give the same model for that shape (a test compares
// them on the shipped file). A hand edit that keeps the shape but repeats a key or leaves a section
// empty is read by the line reader (the last repeat wins) where yaml-cpp would differ.
void load_word_model(const std::string& file, const Taxonomy& t, WordModel& m);
// `text` in the generated shape, every label and count valid: true with `m` filled; false (m
// untouched) otherwise.
bool load_generated_word_model(const std::string& text, const Taxonomy& t, WordModel& m);
void load_word_model_yaml(const std::string& file, const Taxonomy& t, WordModel& m);

// A vocabulary word of the input: its first line and that line's text.
struct WordHit {
  std::string word;
  size_t line = 0;  // 1-based
  std::string text;
};

// The distinct vocabulary words of the first `max_bytes` of `text`, tokenised as learn_tokens.py's
// word_tokens() does (a letter, then 2 to 39 letters, digits or '_'; lower-cased; since stop 70
// also the parts of a compound identifier, `ZeroInitContext`: zero, init, context), in order of
// first line.
std::vector<WordHit> vocabulary_words(std::string_view text, const WordModel& m, size_t max_bytes);
// The same tokenising, keeping the distinct words `known` accepts; the identifiers' parts too
// when `parts` (ranker_neighbours.cpp reads whole words only, as learn_tokens.py's tokens()).
std::vector<WordHit> known_words(std::string_view text, size_t max_bytes,
                                 const std::function<bool(const std::string&)>& known, bool parts);
// The parts of a compound identifier (letters, digits and '_'), lower-cased, as learn_tokens.py's
// IDENT_PART finds them: `HTTPServer_v2`: http, server, v, 2.
std::vector<std::string> identifier_parts(std::string_view word);

// P(label | words) over the labels of kind `kind`: the naive Bayes with add-`alpha` smoothing;
// where the file has a logistic regression for the kind, the mean of the two posteriors, raised
// to `mix_power` and normalised again (stop 53; 1: the mean as it is).
std::map<std::string, double> word_posterior(const WordModel& m, WordLabel kind,
                                             const std::vector<WordHit>& words, double alpha,
                                             double mix_power = 1.0);

// The words of `words` that point at `label` most (log P(w | label) over log P(w) of all
// failures, above 0), strongest first, at most `n`.
std::vector<const WordHit*> carrying_words(const WordModel& m, WordLabel kind,
                                           const std::string& label,
                                           const std::vector<WordHit>& words, double alpha,
                                           size_t n);

}  // namespace fl::triage
