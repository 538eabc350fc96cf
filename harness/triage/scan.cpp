#include "harness/triage/scan.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <regex>

#include "base/text_mask.hpp"

namespace fl::triage {

namespace {

// The extensions of the files the rows name: Python frames, C++/CUDA sources and headers (NCCL's
// `transport/nvls.cc`, `ProcessGroupNCCL.cpp`, `NCCLUtils.hpp`, a kernel's `.cu` assertion),
// shared objects, checkpoints and Megatron-LM's data files, scripts and executables; and config
// files and wheels, which no row names yet.
constexpr std::array<std::string_view, 23> kFileExtensions = {
    "py",  "pyc", "so",  "c",  "cc",  "cpp",         "cu",   "cuh",  "h",    "hpp", "pt", "pth",
    "bin", "idx", "swp", "sh", "exe", "safetensors", "ckpt", "json", "yaml", "yml", "whl"};

// Parts of file and folder names the rows read without an extension or a separator.
constexpr std::array<std::string_view, 4> kNameParts = {"site-packages", "dist-packages",
                                                        "torch_extensions", "_document\\b"};

// `.ext` (in a regex `\.ext`) at `i` (the dot) with no letter, digit or `_` after it.
bool extension_at(std::string_view s, size_t i) {
  for (const auto ext : kFileExtensions) {
    if (s.compare(i + 1, ext.size(), ext) != 0) continue;
    const size_t end = i + 1 + ext.size();
    if (end == s.size() || !word_char(s[end])) return true;
  }
  return false;
}

bool names_a_path(std::string_view s) {
  if (s.find('/') != std::string_view::npos) return true;
  if (s.find("\\\\") != std::string_view::npos) return true;  // a regex's literal backslash
  for (size_t i = s.find('.'); i != std::string_view::npos; i = s.find('.', i + 1)) {
    if (extension_at(s, i)) return true;
  }
  if (std::any_of(kNameParts.begin(), kNameParts.end(),
                  [&](std::string_view p) { return s.find(p) != std::string_view::npos; }))
    return true;
  // A code name (snake_case: a script, module, function or variable) is what file names and
  // traceback paths are made of: `tools/run_text_generation_server.py`, `./zero_to_fp32.py`,
  // `colossalai/zero/gemini/gemini_ddp.py`, `./all_reduce_perf`.
  for (size_t i = s.find('_'); i != std::string_view::npos; i = s.find('_', i + 1)) {
    const bool before = i > 0 && std::isalnum(static_cast<unsigned char>(s[i - 1]));
    const bool after = i + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[i + 1]));
    if (before || after) return true;
  }
  return false;
}

}  // namespace

bool reads_paths(std::string_view needle, std::string_view regex) {
  return names_a_path(ascii_lower(needle)) || names_a_path(ascii_lower(regex));
}

std::vector<NeedleHit> needle_hits(const std::string& text, const Tables& t) {
  const std::string low = ascii_lower(text);
  std::vector<const std::string*> needles;
  for (const auto& s : t.signatures) needles.push_back(&s.needle);
  for (const auto& e : t.env_rules) needles.push_back(&e.needle);
  const size_t first_cue = needles.size();  // cue words: at the start of a word unless `anywhere`
  for (const auto& c : t.ranker.cues) needles.push_back(&c.word);
  std::vector<std::vector<uint32_t>> by_bigram(1 << 16);
  auto bigram = [](char a, char b) {
    return (static_cast<unsigned>(static_cast<unsigned char>(a)) << 8) |
           static_cast<unsigned char>(b);
  };
  for (size_t row = 0; row < needles.size(); ++row) {
    by_bigram[bigram((*needles[row])[0], (*needles[row])[1])].push_back(static_cast<uint32_t>(row));
  }
  std::vector<size_t> last_line(needles.size(), 0);
  std::vector<int> cue_lines(needles.size(), 0);  // a cue word needs a few lines, not a log's
  std::vector<NeedleHit> out;
  size_t line = 1, start = 0;
  for (size_t i = 0; i + 1 < low.size(); ++i) {
    if (low[i] == '\n') {
      ++line;
      start = i + 1;
      continue;
    }
    for (const uint32_t row : by_bigram[bigram(low[i], low[i + 1])]) {
      const std::string& n = *needles[row];
      // The third byte before the whole compare: most rows that share a bigram part there.
      if (last_line[row] == line || (n.size() > 2 && low[i + 2] != n[2]) ||
          low.compare(i, n.size(), n) != 0)
        continue;
      if (row >= first_cue) {
        const bool mid_word = i > start && word_char(low[i - 1]);
        if ((mid_word && !t.ranker.cues[row - first_cue].anywhere) || cue_lines[row]++ >= 3)
          continue;
      }
      last_line[row] = line;
      out.push_back({start, 0, line, row});
    }
  }
  for (auto& h : out) {
    h.end = low.find('\n', h.start);
    if (h.end == std::string::npos) h.end = low.size();
  }
  std::stable_sort(out.begin(), out.end(), [](const NeedleHit& a, const NeedleHit& b) {
    return a.line != b.line ? a.line < b.line : a.row < b.row;
  });
  return out;
}

const std::string& MaskedLine::of(size_t line, const std::string& raw, bool lower) {
  if (line != line_) {
    line_ = line;
    text_ = mask_file_paths(raw);
    low_ = ascii_lower(text_);
  }
  return lower ? low_ : text_;
}

bool signature_matches(const Signature& s, const std::string& text, size_t line,
                       MaskedLine& masked) {
  if (s.raw_line) return regex_find(s.icase ? ascii_lower(text) : text, s.regex);
  // The needle was found in the raw line; it may have been only in a path.
  if (masked.of(line, text, true).find(s.needle) == std::string::npos) return false;
  return regex_find(masked.of(line, text, s.icase), s.regex);
}

bool only_in_paths(const std::string& line, const std::string& word) {
  const std::string low = ascii_lower(line);
  bool seen = false;
  for (size_t i = low.find(word); i != std::string::npos; i = low.find(word, i + 1)) {
    seen = true;
    const size_t blank = low.find_last_of(" \t", i);
    const size_t from = blank == std::string::npos ? 0 : blank + 1;
    const size_t to = std::min(low.find_first_of(" \t", i), low.size());
    if (i + word.size() > to) return false;
    if (low.substr(from, to - from).find('/') == std::string::npos) return false;
  }
  return seen;
}

}  // namespace fl::triage
