// Rows that read across lines (`context_for:` in a signature table). A signature reads one line;
// an out-of-memory error says nothing about the stage it happened in, and the words that say it
// (`init_inference(`, a generation server, an engine set-up frame) are often on another line of
// the same report. A context row names the stage-neutral error rows it re-reads:
//
//   - id: inference-context-oom
//     needle: "init_inference"
//     regex: 'init_inference'
//     context_for: [cuda-oom, cuda-error-oom]   # rows of any table file
//     symptoms: {"5.2": 4}
//
// Its own lines are context only: the row scores when one of the listed rows matched a line and
// the row itself matched another line, and then its evidence is both lines, the error row's first
// such line and a context line (so it scores its weight x 1.25, as any row with two lines).
// Without both it does not count at all: the context alone, or context and error that meet only
// on one line (that line is left to the rows that read one line).
#pragma once

#include <string>
#include <vector>

#include "harness/triage/triage.hpp"

namespace YAML {
class Node;
}

namespace fl::triage {

// The lines one signature matched (distinct texts, at most Options::max_hits).
struct Hit {
  std::vector<EvidenceLine> lines;
};

// A row's `context_for:` list: a non-empty sequence of signature ids ({} when the key is absent).
std::vector<std::string> read_context_for(const std::string& file, const YAML::Node& item);

// Every id a context row lists names a signature of the loaded tables that is not itself a context
// row, and no context row is a learned fallback; throws SignatureError naming the row's file.
void check_context_rows(const Tables& t);

// After the scan (`hits[i]`: the lines signature i matched): a context row keeps one context line
// and gains its error row's line when the two are different lines, else it is cleared.
void apply_context_rows(std::vector<Hit>& hits, const Tables& t);

}  // namespace fl::triage
