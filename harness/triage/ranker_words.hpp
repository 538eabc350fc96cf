// The learned word ranker of `faultline triage` (stop 48): a multinomial naive Bayes over the
// words of the input, from counts that harness/triage/learn_ranker.py makes on the corpus's tune
// split (harness/triage/ranker/words.yaml). The ranker uses its posteriors to lean the inferred
// stage and to order the symptoms it fills in; every candidate it moves names the words that
// carried it and their lines.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fl::triage {

struct Taxonomy;

// words.yaml: label -> failures, and word -> label -> failures holding the word. A label is a
// symptom id ("4.11") or a stage ("4").
struct WordModel {
  bool loaded = false;
  int issues = 0;
  std::map<std::string, double> symptoms, stages;  // failures per label (secondary symptoms 0.5)
  std::unordered_map<std::string, std::map<std::string, double>> word_symptoms, word_stages;
  std::map<std::string, double> symptom_words, stage_words;  // per label: the sum over words
};

// Reads `file` into `m` (a missing file leaves m.loaded false); throws SignatureError.
void load_word_model(const std::string& file, const Taxonomy& t, WordModel& m);

// A vocabulary word of the input: its first line and that line's text.
struct WordHit {
  std::string word;
  size_t line = 0;  // 1-based
  std::string text;
};

// The distinct vocabulary words of the first `max_bytes` of `text`, tokenised as learn_tokens.py
// does (a letter, then 2 to 39 letters, digits or '_'; lower-cased), in order of first line.
std::vector<WordHit> vocabulary_words(std::string_view text, const WordModel& m, size_t max_bytes);

// P(label | words) over the symptoms (stages = false) or the stages, with add-`alpha` smoothing.
std::map<std::string, double> word_posterior(const WordModel& m, bool stages,
                                             const std::vector<WordHit>& words, double alpha);

// The words of `words` that point at `label` most (log P(w | label) over log P(w) of all
// failures, above 0), strongest first, at most `n`.
std::vector<const WordHit*> carrying_words(const WordModel& m, bool stages,
                                           const std::string& label,
                                           const std::vector<WordHit>& words, double alpha,
                                           size_t n);

}  // namespace fl::triage
