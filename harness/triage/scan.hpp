// The scan of triage's tables over a text: which lines hold which row's needle (one pass), and
// what line a signature row's regex reads. A row keyed on a path, a file name or a code name (a
// traceback frame, an NCCL source file, a shared object, a script) reads the line as it is; every
// other row reads it with its file paths masked (base/text_mask.hpp: mask_file_paths), as
// fl-detect-logs does, so that a row of ordinary words does not read a directory's name
// (`\bOOM\b` in `/data/oom-killer-repro/`).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "harness/triage/triage.hpp"

namespace fl::triage {

// Whether a row keys on paths or file names, and so reads the raw line: its needle or regex holds
// a path separator (`/`, a regex's `\\`), a file extension (`.py`, `.so`, `.cc`, `.cpp`, `.cu`,
// `.h`, `.pt`, `.idx`, ...: `kFileExtensions` in scan.cpp) or a part of a file or folder name the
// rows read (`site-packages`, `torch_extensions`, Megatron-LM's `_document` data prefixes), or a
// code name (a `_` next to a letter or digit: `zero_to_fp32`, `all_reduce_perf`).
bool reads_paths(std::string_view needle, std::string_view regex);

// A line that holds a needle: where it starts, and which table row (signatures first, then env,
// then the ranker's cue words).
struct NeedleHit {
  size_t start = 0, end = 0, line = 0;  // the line's bytes and 1-based number
  size_t row = 0;                       // signature index, or signatures.size() + env index, ...
};

// Every (line, row) whose line holds the row's needle, in line order (and row order within a
// line). One pass over the lower-cased text: a table keyed by each needle's first two bytes says
// which needles can start at a position, so the cost does not grow with the number of signatures.
std::vector<NeedleHit> needle_hits(const std::string& text, const Tables& t);

// The line a row of ordinary words reads: the current line with its file paths masked, made on
// first use and kept while the scan stays on that line (the hits come in line order), so a line no
// such row's needle hit is never masked.
class MaskedLine {
 public:
  // `raw` (the text of line `line`) masked; `lower`: also lower-cased.
  const std::string& of(size_t line, const std::string& raw, bool lower);

 private:
  size_t line_ = 0;  // 0: none yet
  std::string text_, low_;
};

// Whether signature `s` matches `text`, the text of line `line`: its regex on the raw line for a
// row that reads paths, else on the masked line once the needle is still in it.
bool signature_matches(const Signature& s, const std::string& text, size_t line,
                       MaskedLine& masked);

// Whether `word` occurs in `line` and every occurrence lies in a path or URL: a run of non-blank
// characters that holds a '/'. A word the line's text does not show (the hit's text is cut at
// 4096 bytes; the scanner reads the whole line) counts as outside paths, and so does one that
// crosses a blank (`how to` after `docs/how`).
bool only_in_paths(const std::string& line, const std::string& word);

}  // namespace fl::triage
