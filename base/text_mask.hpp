// What a reader of text must not take as evidence in a line: the file paths it names and the
// run's own name. Both are labels someone chose (a directory, a job id), not what happened: a
// checkpoint under runs/truncated-shard-resume-s7/ says nothing about a truncation, and a job
// called oom-killer-test was not killed by the OOM killer. Real logs and issue texts are full of
// paths (tracebacks, checkpoint and cache directories, flight-recorder dumps), so a log detector in
// the field has to look past them as much as one under faultline's benchmark, whose run
// directories carry the scenario's name. Header-only, in base/ so that its two users share it:
// fl-detect-logs' and fl-detect-comm's words (harness/detectors/) and triage's copy of the logs
// table (harness/triage/dialect.cpp), which may not include a detector's header.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace fl {

inline constexpr std::string_view kMaskedPath = "<path>";
inline constexpr std::string_view kMaskedRun = "<run>";

namespace mask_detail {

// Characters that end a path token: whitespace, quotes, brackets and list punctuation (a path
// quoted in 'x' or (x), or one of a comma-separated list such as the OOM killer's
// `oom_memcg=/a,task_memcg=/b`), and any byte of a multi-byte UTF-8 character: Chinese and
// Japanese text sets no blank between words, so in "日志在/data/x/run.log" the path starts after
// the last CJK character (a path with a non-ASCII directory is masked piece by piece).
inline bool path_char(char c) {
  if (static_cast<unsigned char>(c) >= 0x80) return false;
  if (std::isspace(static_cast<unsigned char>(c))) return false;
  switch (c) {
    case '\'':
    case '"':
    case '`':
    case '(':
    case ')':
    case '[':
    case ']':
    case '{':
    case '}':
    case '<':
    case '>':
    case ',':
    case ';':
      return false;
    default:
      return true;
  }
}

// A token is a path when it has a '/' and something besides digits, dots and slashes around it,
// so a count like `1/3 clients joined` or a ratio `0.5/1.0` stays as it is.
inline bool is_path(std::string_view t) {
  if (t.find('/') == std::string_view::npos) return false;
  for (char c : t) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '/') return true;
  }
  return false;
}

// Punctuation that ends a sentence or a field after a path (`checkpoint DIR: shard ...`) is
// kept: it is the line's, not the path's.
inline size_t trim_trailing(std::string_view t) {
  size_t n = t.size();
  while (n > 1 && (t[n - 1] == ':' || t[n - 1] == '.' || t[n - 1] == '!' || t[n - 1] == '?')) --n;
  return n;
}

inline bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

// A token that names a file rather than joins two words: a path as above that is absolute or
// relative to a named folder (`/a`, `./a`, `../a`, `~/a`), a URL, one of two or more components,
// or one whose last component has an extension (`tools/run.py`). `hangs/crashes`, `P2P/direct`,
// `NET/IB`, `tokens/s` and `and/or` are words of a sentence or a log, not paths. A `key=` before
// the path is not part of it.
inline bool is_file_path(std::string_view t) {
  if (!is_path(t)) return false;
  const size_t eq = t.substr(0, t.find('/')).rfind('=');
  if (eq != std::string_view::npos) t.remove_prefix(eq + 1);
  if (t.empty()) return false;
  if (t[0] == '/' || t.rfind("./", 0) == 0 || t.rfind("../", 0) == 0 || t.rfind("~/", 0) == 0)
    return true;
  if (t.find("://") != std::string_view::npos) return true;
  if (std::count(t.begin(), t.end(), '/') >= 2) return true;
  const std::string_view last = t.substr(t.rfind('/') + 1);
  return last.find('.') != std::string_view::npos;
}

// `line` with every token `masks(token)` says is a path replaced by <path>.
template <typename Pred>
std::string mask_paths_if(std::string_view line, Pred masks) {
  std::string out;
  out.reserve(line.size());
  size_t i = 0;
  while (i < line.size()) {
    if (!path_char(line[i])) {
      out += line[i++];
      continue;
    }
    size_t j = i;
    while (j < line.size() && path_char(line[j])) ++j;
    const std::string_view tok = line.substr(i, j - i);
    if (masks(tok)) {
      // A `key=` before the path is the line's (`oom_memcg=/a`, `--save-dir=/b`).
      const size_t eq = tok.substr(0, tok.find('/')).rfind('=');
      const size_t from = eq == std::string_view::npos ? 0 : eq + 1;
      const size_t keep = trim_trailing(tok);
      out += tok.substr(0, from);
      out += kMaskedPath;
      out += tok.substr(std::max(keep, from));
    } else {
      out += tok;
    }
    i = j;
  }
  return out;
}

}  // namespace mask_detail

// `line` with every path (a token with a '/', as above: /abs/x, rel/x, ./x, URLs) replaced by
// <path>.
inline std::string mask_paths(std::string_view line) {
  return mask_detail::mask_paths_if(line, mask_detail::is_path);
}

// `line` with every file path (mask_detail::is_file_path: not a pair of words joined by a '/')
// replaced by <path>: what triage's signature rows read in an issue's prose and logs.
inline std::string mask_file_paths(std::string_view line) {
  return mask_detail::mask_paths_if(line, mask_detail::is_file_path);
}

// `line` with every whole-word occurrence of `name` (the run's name: its directory's last
// component) replaced by <run>. Names under 4 characters are left alone: they would hit ordinary
// words.
inline std::string mask_name(std::string_view line, std::string_view name) {
  if (name.size() < 4) return std::string(line);
  std::string out;
  out.reserve(line.size());
  size_t i = 0;
  while (i < line.size()) {
    const size_t at = line.find(name, i);
    if (at == std::string_view::npos) break;
    const size_t end = at + name.size();
    const bool whole = (at == 0 || !mask_detail::name_char(line[at - 1])) &&
                       (end == line.size() || !mask_detail::name_char(line[end]));
    out += line.substr(i, at - i);
    out += whole ? kMaskedRun : name;
    i = end;
  }
  out += line.substr(i);
  return out;
}

// The last component of a run directory (FAULTLINE_RUN_DIR), its name; "" for none.
inline std::string run_name(std::string_view run_dir) {
  while (!run_dir.empty() && run_dir.back() == '/') run_dir.remove_suffix(1);
  const size_t slash = run_dir.rfind('/');
  return std::string(slash == std::string_view::npos ? run_dir : run_dir.substr(slash + 1));
}

// Both masks: the run's name first (it may stand outside any path), then the paths.
inline std::string mask_text(std::string_view line, std::string_view run) {
  return mask_paths(run.empty() ? std::string(line) : mask_name(line, run));
}

}  // namespace fl
