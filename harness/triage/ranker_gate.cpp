#include "harness/triage/ranker_gate.hpp"

#include <algorithm>
#include <string>

#include "harness/triage/ranker_words.hpp"
#include "harness/triage/scan.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

Gate open_gate(const RankInput& in, const Ranker& k) {
  auto on_notice_line = [&](const CueHit& h) {
    const std::string line = ascii_lower(h.text);
    return std::any_of(k.notice.begin(), k.notice.end(),
                       [&](const std::string& m) { return line.find(m) != std::string::npos; });
  };
  // A failure word on a notice line is no failure word, and, like a healthy word, keeps an
  // answer on context lines alone from being given (the log says what it shows is benign).
  // Stop 51: a healthy word only inside paths (`examples/pretrain_bert.sh`) is no healthy word.
  auto kind_hit = [&](Cue::Kind kind) {
    return std::any_of(in.cues.begin(), in.cues.end(), [&](const CueHit& h) {
      const Cue::Kind got = k.cues[h.cue].kind;
      if (got == Cue::Kind::kHealthy && only_in_paths(h.text, k.cues[h.cue].word)) return false;
      if (got == Cue::Kind::kFailure && on_notice_line(h)) return kind == Cue::Kind::kHealthy;
      return got == kind;
    });
  };
  const bool healthy = kind_hit(Cue::Kind::kHealthy);
  const bool failure_word =
      (k.error_text_is_failure && in.error_text) || kind_hit(Cue::Kind::kFailure);
  const bool failure =
      failure_word || (k.answer_context_only && in.table_match && !in.error_text && !healthy);
  const bool context = in.table_match || kind_hit(Cue::Kind::kContext);
  if (failure && context) return Gate::kOpen;
  if (failure_word && k.answer_without_context) return Gate::kNoContext;
  if (!failure && context && !healthy && k.answer_without_failure_word) return Gate::kNoFailureWord;
  return Gate::kClosed;
}

bool enough_words(int stage, const std::vector<WordHit>& words, const Ranker& k) {
  if (k.answer_min_words <= 0) return true;
  const auto n = static_cast<size_t>(k.answer_min_words);
  return carrying_words(k.words, WordLabel::kStage, std::to_string(stage), words, k.nb_alpha, n)
             .size() >= n;
}

}  // namespace fl::triage
