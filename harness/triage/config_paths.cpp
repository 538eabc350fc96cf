#include "harness/triage/config_paths.hpp"

#include "harness/triage/regex.hpp"
#include "harness/triage/triage.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

namespace fl::triage {

namespace {
namespace cfg {  // named: a unity build shares one anonymous namespace between files

constexpr size_t kMaxDepth = 16;

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

bool bare_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// The levels open at a point of the text, and a key read whose value has not come yet.
class Reader {
 public:
  Reader(std::vector<ConfigPath>& out, size_t max_paths, const PathFilter& keep)
      : out_(out), max_(max_paths), keep_(keep) {}

  void line(std::string_view raw, size_t number) {
    line_ = number;
    const std::string_view s = trim(raw);
    if (s.empty() || s.front() == '#' || s.substr(0, 2) == "//") return;  // a comment keeps them
    if (std::string_view("\"'{}[]").find(s.front()) != std::string_view::npos) {
      tokens(s);
      return;
    }
    // Not a config's line: the config, if any, has ended. A `{` on it may open another one.
    levels_.clear();
    pending_.reset();
    const size_t brace = s.find('{');
    if (brace == std::string_view::npos) return;
    pending_ = key_before(s.substr(0, brace));
    tokens(s.substr(brace));
  }

  bool full() const { return out_.size() >= max_; }

 private:
  // `name:` or `name =` right before an opening brace: the level's name ("" when none).
  static std::string key_before(std::string_view s) {
    s = trim(s);
    if (s.empty() || (s.back() != ':' && s.back() != '=')) return {};
    s.remove_suffix(1);
    s = trim(s);
    size_t i = s.size();
    while (i > 0 && bare_key_char(s[i - 1])) --i;
    return ascii_lower(s.substr(i));
  }

  // False when the level would be too deep: not a config; its levels are dropped.
  bool open() {
    if (levels_.size() >= kMaxDepth) {
      levels_.clear();
      pending_.reset();
      return false;
    }
    levels_.push_back(pending_ ? *pending_ : std::string());
    pending_.reset();
    return true;
  }

  void close() {
    if (!levels_.empty()) levels_.pop_back();
    pending_.reset();
  }

  void value(std::string_view v) {
    if (!pending_ || full()) {
      pending_.reset();
      return;
    }
    std::string path;
    for (const auto& l : levels_) {
      if (l.empty()) continue;
      path += l;
      path += '.';
    }
    path += *pending_;
    pending_.reset();
    ConfigPath p{line_, path + ": " + std::string(v)};
    if (!keep_ || keep_(p.text)) out_.push_back(std::move(p));
  }

  // One line's tokens, from a character of "'{}[] or a `{`.
  void tokens(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && !full()) {
      const char c = s[i];
      if (blank(c) || c == ',' || c == ':') {
        ++i;
      } else if (c == '{' || c == '[') {
        if (!open()) return;  // the rest of the line is not read
        ++i;
      } else if (c == '}' || c == ']') {
        close();
        ++i;
      } else if (c == '#' || s.substr(i, 2) == "//") {
        return;  // a comment
      } else if (c == '"' || c == '\'') {
        size_t j = i + 1;
        while (j < s.size() && s[j] != c) j += s[j] == '\\' ? 2 : 1;
        const std::string_view str = s.substr(i + 1, std::min(j, s.size()) - i - 1);
        i = std::min(j + 1, s.size());
        size_t k = i;
        while (k < s.size() && blank(s[k])) ++k;
        if (k < s.size() && s[k] == ':') {
          pending_ = ascii_lower(str);
          i = k + 1;
        } else {
          value(str);
        }
      } else {
        size_t j = i;
        while (j < s.size() && std::string_view(",{}[]").find(s[j]) == std::string_view::npos) {
          // A comment after the value (`True  # on A100`) ends it, and the line.
          if (blank(s[j]) && (s.substr(j + 1, 1) == "#" || s.substr(j + 1, 2) == "//")) break;
          ++j;
        }
        value(trim(s.substr(i, j - i)));
        i = j;
      }
    }
  }

  std::vector<ConfigPath>& out_;
  size_t max_;
  const PathFilter& keep_;
  size_t line_ = 0;
  std::vector<std::string> levels_;  // each level's name ("" for none)
  std::optional<std::string> pending_;
};

}  // namespace cfg
}  // namespace

std::vector<ConfigPath> config_paths(const std::string& text, size_t max_paths,
                                     const PathFilter& keep) {
  std::vector<ConfigPath> out;
  cfg::Reader reader(out, max_paths, keep);
  size_t number = 1;
  for (size_t start = 0; start < text.size() && !reader.full(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    reader.line(std::string_view(text).substr(start, end - start), number);
    start = end + 1;
  }
  return out;
}

namespace {

// A key path's setting: `zero_optimization.offload_param.device: nvme` -> `device`; and a nested
// rule's (the last part of its needle: `offload_optimizer.device` -> `device`).
std::string leaf_of(const std::string& path_or_needle) {
  const std::string path = path_or_needle.substr(0, path_or_needle.find(": "));
  return path.substr(path.rfind('.') + 1);
}

bool rule_reads(const EnvRule& e, const ConfigPath& p, std::smatch& m) {
  return ascii_lower(p.text).find(e.needle) != std::string::npos && regex_find(p.text, m, e.regex);
}

}  // namespace

ConfigRead::ConfigRead(const std::string& text, const Tables& t, const Options& o) : t_(t) {
  if (t.config_rules.empty()) return;
  std::set<std::string> leaves;
  for (const auto& e : t.config_rules) leaves.insert(leaf_of(e.needle));
  const PathFilter keep = [&](const std::string& p) {
    const std::string low = ascii_lower(p);
    return leaves.count(leaf_of(low)) > 0 ||
           std::any_of(t.config_rules.begin(), t.config_rules.end(),
                       [&](const EnvRule& e) { return low.find(e.needle) != std::string::npos; });
  };
  paths_ = config_paths(text, o.max_regex_lines, keep);
  for (const auto& p : paths_) lines_.insert(p.line);
}

bool ConfigRead::says_otherwise(size_t line, const std::string& key) const {
  const auto from = std::lower_bound(paths_.begin(), paths_.end(), line,
                                     [](const ConfigPath& p, size_t l) { return p.line < l; });
  const auto to = std::upper_bound(from, paths_.end(), line,
                                   [](size_t l, const ConfigPath& p) { return l < p.line; });
  return std::any_of(from, to, [&](const ConfigPath& p) {
    if (p.text.substr(0, p.text.find(": ")).find('.') == std::string::npos) return false;
    bool speaks = false, reads = false;
    std::smatch m;
    for (const auto& e : t_.config_rules) {
      if (e.key != key) continue;
      speaks = speaks || leaf_of(e.needle) == leaf_of(ascii_lower(p.text));
      reads = reads || rule_reads(e, p, m);
    }
    return speaks && !reads;
  });
}

void ConfigRead::add_facts(Result& r) const {
  std::set<std::string> seen;
  for (const auto& p : paths_) {
    for (const auto& e : t_.config_rules) {
      std::smatch m;
      if (seen.count(e.key) || !rule_reads(e, p, m)) continue;
      seen.insert(e.key);
      EnvFact fact{e.key, m[1].str(), p.line, p.text};
      const auto same = std::find_if(r.env.begin(), r.env.end(),
                                     [&](const EnvFact& f) { return f.key == e.key; });
      if (same == r.env.end()) {
        r.env.push_back(std::move(fact));
      } else if (same->line > p.line || (same->line != p.line && lines_.count(same->line))) {
        *same = std::move(fact);
      }
    }
  }
}

}  // namespace fl::triage
