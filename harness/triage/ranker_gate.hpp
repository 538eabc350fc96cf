// Stop 50: the ranker's answer gate. When the tables reach no answer, the ranker answers on an
// inferred stage only when the text says it is a failure (a failure word, or table context with
// no healthy word) and names distributed context; the relaxed openings (cues.yaml
// answer_without_context, answer_without_failure_word) answer with less and need
// answer_min_words learned words that lean the inferred stage.
#pragma once

#include <vector>

#include "harness/triage/ranker.hpp"

namespace fl::triage {

// kOpen: a failure word (or a context-only match) and context; kNoContext, kNoFailureWord: the
// relaxed openings; kClosed: no answer.
enum class Gate { kClosed, kOpen, kNoContext, kNoFailureWord };

Gate open_gate(const RankInput& in, const Ranker& k);

// A relaxed answer's evidence: at least answer_min_words of the input's learned `words` lean
// `stage`.
bool enough_words(int stage, const std::vector<WordHit>& words, const Ranker& k);

}  // namespace fl::triage
