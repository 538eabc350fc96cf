#include "harness/triage/triage.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <istream>
#include <map>
#include <set>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/triage/config_paths.hpp"
#include "harness/triage/context_rows.hpp"
#include "harness/triage/scan.hpp"
#include "harness/triage/yaml_file.hpp"

namespace fl::triage {

namespace fs = std::filesystem;

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  // Not std::tolower: a call per byte through the C library's locale tables (8% of triage's time
  // on a 16 MiB log); the program never leaves the "C" locale, where the two agree.
  for (auto& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

bool has_whole_word(std::string_view text, const std::string& word) {
  return has_whole_word_lower(ascii_lower(text), word);
}

bool has_whole_word_lower(std::string_view low, const std::string& word) {
  for (size_t i = low.find(word); i != std::string::npos; i = low.find(word, i + 1)) {
    const size_t end = i + word.size();
    if ((i == 0 || !word_char(low[i - 1])) && (end == low.size() || !word_char(low[end]))) {
      return true;
    }
  }
  return false;
}

namespace {

std::string scalar(const std::string& file, const YAML::Node& item, const char* key,
                   bool required) {
  const YAML::Node n = item[key];
  if (!n) {
    if (required) fail_at(file, item, fmt::format("missing key '{}'", key));
    return {};
  }
  if (!n.IsScalar()) fail_at(file, n, fmt::format("{}: must be a string", key));
  return n.as<std::string>();
}

// An env rule's `count`: absent, `lines` or `items`.
EnvRule::Count count_of(const std::string& file, const YAML::Node& item) {
  const YAML::Node n = item["count"];
  if (!n) return EnvRule::Count::kNone;
  const std::string v = n.IsScalar() ? n.as<std::string>() : "";
  if (v == "lines") return EnvRule::Count::kLines;
  if (v == "items") return EnvRule::Count::kItems;
  fail_at(file, n,
          n.IsScalar() ? fmt::format("count: '{}' (allowed: lines, items)", v)
                       : std::string("count: must be a string (allowed: lines, items)"));
}

// A needle as the scan uses it: at least 2 characters, lower-cased (a needle is always a
// case-insensitive prefilter). `n` is its node, for the error's line and column.
std::string needle_of(const std::string& file, const YAML::Node& n, const std::string& text) {
  if (text.size() < 2) fail_at(file, n, "needle: at least 2 characters");
  return ascii_lower(text);
}

// An env rule's `needle`: one string, or a list of them for one regex that several words
// announce (`needle: [gpu, v100, a100]`), each at least 2 characters and named once, lower-cased
// (a needle is always a case-insensitive prefilter).
std::vector<std::string> env_needles(const std::string& file, const YAML::Node& item) {
  const YAML::Node n = item["needle"];
  if (!n) fail_at(file, item, "missing key 'needle'");
  if (!n.IsScalar() && !n.IsSequence())
    fail_at(file, n, "needle: must be a string or a list of strings");
  if (n.IsSequence() && n.size() == 0) fail_at(file, n, "needle: the list is empty");
  std::vector<YAML::Node> given;
  if (n.IsScalar()) {
    given.push_back(n);
  } else {
    for (const YAML::Node& e : n) given.push_back(e);
  }
  std::vector<std::string> out;
  for (const YAML::Node& e : given) {
    if (!e.IsScalar()) fail_at(file, e, "needle: each entry must be a string");
    std::string needle = needle_of(file, e, e.as<std::string>());
    if (std::find(out.begin(), out.end(), needle) != out.end())
      fail_at(file, e, fmt::format("needle: '{}' is already in this rule's list", needle));
    out.push_back(std::move(needle));
  }
  return out;
}

// An `icase` regex is compiled with its letters lower-cased and run on the lower-cased line:
// libstdc++'s std::regex::icase looks up the locale's ctype facet for every character it
// compares, which made a 50 MiB training log (a `loss` or `step` on every line) take 13 s. A
// letter right after a backslash is an escape (`\d`, `\W`, `\b`) and keeps its case.
std::string lower_pattern(const std::string& text) {
  std::string out = text;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\\') {
      ++i;  // the escaped character stays as written
      continue;
    }
    out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[i])));
  }
  return out;
}

// `lowered`: compile an icase regex for lower-cased lines (signatures); an environment rule keeps
// std::regex::icase, because its group is a value whose case is kept.
Regex compile(const std::string& file, const YAML::Node& n, const std::string& text, bool icase,
              bool lowered) {
  try {
    auto flags = std::regex::ECMAScript | std::regex::optimize;
    if (icase && lowered) return make_regex(lower_pattern(text), flags);
    if (icase) flags |= std::regex::icase;
    return make_regex(text, flags);
  } catch (const std::regex_error& e) {
    fail_at(file, n,
            fmt::format("regex: '{}' is not a valid ECMAScript regex: {}", text, e.what()));
  }
}

bool as_bool(const std::string& file, const YAML::Node& item, const char* key) {
  const YAML::Node n = item[key];
  if (!n) return false;
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    fail_at(file, n, fmt::format("{}: must be true or false", key));
  }
}

std::map<std::string, double> weights(const std::string& file, const YAML::Node& item,
                                      const char* key,
                                      const std::map<std::string, std::string>& known) {
  std::map<std::string, double> out;
  const YAML::Node n = item[key];
  if (!n) return out;
  if (!n.IsMap()) fail_at(file, n, fmt::format("{}: must map ids to weights", key));
  for (const auto& kv : n) {
    const auto id = kv.first.as<std::string>();
    if (!known.count(id)) {
      fail_at(file, kv.first, fmt::format("{}: '{}' is not in the taxonomy", key, id));
    }
    try {
      out[id] = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      fail_at(file, kv.second, fmt::format("{}: {}: the weight must be a number", key, id));
    }
  }
  return out;
}

void load_file(const std::string& file, Tables& t) {
  const YAML::Node doc = load_yaml(file, "signature file");
  if (!doc) return;
  check_keys(file, doc, {"signatures", "env"}, "file");
  std::map<std::string, std::string> stage_of;
  for (const auto& [id, st] : t.taxonomy.symptom_stage) stage_of[id] = std::to_string(st);
  for (const auto& item : doc["signatures"]) {
    check_keys(file, item,
               {"id", "needle", "regex", "icase", "env", "fallback", "symptoms", "root_cause",
                "note", "context_for", "reinfer"},
               "signature");
    Signature s;
    s.file = file;
    s.id = scalar(file, item, "id", true);
    s.icase = as_bool(file, item, "icase");
    s.env = as_bool(file, item, "env");
    s.fallback = as_bool(file, item, "fallback");
    s.reinfer = as_bool(file, item, "reinfer");
    s.needle = needle_of(file, item["needle"], scalar(file, item, "needle", true));
    const std::string regex = scalar(file, item, "regex", true);
    s.regex = compile(file, item["regex"], regex, s.icase, true);
    s.raw_line = reads_paths(s.needle, regex);
    s.symptoms = weights(file, item, "symptoms", stage_of);
    if (s.symptoms.empty()) fail_at(file, item, "symptoms: at least one symptom id with a weight");
    s.root_causes = weights(file, item, "root_cause", t.taxonomy.root_cause_name);
    s.note = scalar(file, item, "note", false);
    s.context_for = read_context_for(file, item);
    for (const auto& o : t.signatures) {
      if (o.id == s.id)
        fail_at(file, item["id"], fmt::format("id: '{}' is also in {}", s.id, o.file));
    }
    t.signatures.push_back(std::move(s));
  }
  for (const auto& item : doc["env"]) {
    check_keys(file, item, {"key", "needle", "regex", "icase", "nested", "count"}, "env rule");
    EnvRule r;
    r.file = file;
    r.key = scalar(file, item, "key", true);
    r.icase = as_bool(file, item, "icase");
    r.nested = as_bool(file, item, "nested");
    r.count = count_of(file, item);
    if (r.count != EnvRule::Count::kNone && r.nested)
      fail_at(file, item["count"], "count: not with nested");
    r.regex = compile(file, item["regex"], scalar(file, item, "regex", true), r.icase, false);
    if (r.regex.mark_count() < 1)
      fail_at(file, item["regex"], "regex: needs a group for the value");
    // One row per needle, in the list's order: a line is tried once per needle it holds.
    for (const std::string& needle : env_needles(file, item)) {
      r.needle = needle;
      (r.nested ? t.config_rules : t.env_rules).push_back(r);
    }
  }
}

}  // namespace

Taxonomy load_taxonomy(const std::string& path) {
  Taxonomy t;
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw SignatureError(fmt::format("{}: cannot load the taxonomy: {}", path, e.what()));
  }
  for (const auto& st : doc["stages"]) {
    const int stage = st["id"].as<int>();
    t.stage_name[stage] = st["name"].as<std::string>();
    for (const auto& s : st["symptoms"]) {
      t.symptom_stage[s["id"].as<std::string>()] = stage;
      t.symptom_name[s["id"].as<std::string>()] = s["name"].as<std::string>();
      if (s["share"]) t.share[s["id"].as<std::string>()] = s["share"].as<double>();
    }
    for (const auto& r : st["root_causes"]) {
      t.root_cause_name[r["id"].as<std::string>()] = r["name"].as<std::string>();
      t.root_cause_by_name[r["name"].as<std::string>()] = r["id"].as<std::string>();
      if (r["share"]) t.share[r["id"].as<std::string>()] = r["share"].as<double>();
    }
  }
  return t;
}

Tables load_tables(const std::string& dir, const std::string& taxonomy_path,
                   const std::string& ranker_dir) {
  Tables t;
  t.taxonomy = load_taxonomy(taxonomy_path);
  t.ranker = load_ranker(ranker_dir, t.taxonomy);
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  if (ec)
    throw SignatureError(
        fmt::format("{}: cannot read the signature folder: {}", dir, ec.message()));
  if (files.empty()) throw SignatureError(fmt::format("{}: no signature files (*.yaml)", dir));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) load_file(f, t);
  check_context_rows(t);
  return t;
}

std::string overruled_note(const Result& r) {
  return fmt::format(
      "the tables' best match, {}, is under cues.yaml's reinfer_below, and the words shown put the "
      "issue in stage {}; the candidates are the tables' matches of that stage, then its common "
      "symptoms on the corpus's tune split",
      r.overruled, r.stage);
}

std::string default_signature_dir() {
  if (const char* d = std::getenv("FAULTLINE_TRIAGE_SIGNATURES"); d && *d) return d;
  return std::string(FAULTLINE_SOURCE_DIR) + "/harness/triage/signatures";
}

std::string default_ranker_dir() {
  if (const char* d = std::getenv("FAULTLINE_TRIAGE_RANKER"); d && *d) return d;
  return std::string(FAULTLINE_SOURCE_DIR) + "/harness/triage/ranker";
}

std::string default_taxonomy_path() {
  if (const char* d = std::getenv("FAULTLINE_TAXONOMY"); d && *d) return d;
  return std::string(FAULTLINE_SOURCE_DIR) + "/scenarios/taxonomy.yaml";
}

Input read_input(std::istream& in, size_t limit) {
  Input out;
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<size_t>(in.gcount());
    out.original_bytes += got;
    out.text.append(chunk.data(), got);
    // Keep memory bounded: drop the head once the text is well past the limit.
    if (out.text.size() > 2 * limit) out.text.erase(0, out.text.size() - limit);
  }
  if (out.text.size() > limit) {
    out.text.erase(0, out.text.size() - limit);
    const auto nl = out.text.find('\n');
    if (nl != std::string::npos) out.text.erase(0, nl + 1);
  }
  out.truncated = out.original_bytes > out.text.size();
  return out;
}

namespace {

// Text triage cannot read: NUL bytes, or mostly invalid UTF-8, in the first 64 KiB.
std::string binary_reason(const std::string& text) {
  const size_t n = std::min<size_t>(text.size(), 64 * 1024);
  size_t nul = 0, bad = 0;
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) ++nul;
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (!ok) {
      ++bad;
      len = 1;
    }
    i += len;
  }
  if (nul > 0)
    return fmt::format("the input is binary ({} NUL bytes in its first {} bytes)", nul, n);
  if (bad * 10 > n)
    return fmt::format("the input is binary ({} of its first {} bytes are not UTF-8)", bad, n);
  return {};
}

void add_candidate(std::map<std::string, Candidate>& m, const std::string& id, double score,
                   const std::vector<EvidenceLine>& ev, bool reinfer = false) {
  auto& c = m[id];
  c.id = id;
  c.score += score;
  if (reinfer) c.reinfer_score += score;
  for (const auto& e : ev) {
    const bool seen = std::any_of(c.evidence.begin(), c.evidence.end(),
                                  [&](const EvidenceLine& x) { return x.line == e.line; });
    if (!seen) c.evidence.push_back(e);
  }
}

std::vector<Candidate> ranked(std::map<std::string, Candidate> m, size_t ev_max) {
  std::vector<Candidate> out;
  for (auto& [id, c] : m) {
    std::sort(c.evidence.begin(), c.evidence.end(),
              [](const EvidenceLine& a, const EvidenceLine& b) { return a.line < b.line; });
    if (c.evidence.size() > ev_max) c.evidence.resize(ev_max);
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  return out;
}

// The candidates of one tier of signatures: the hand-written tables, or the learned words.
struct Scored {
  std::vector<Candidate> symptoms, root_causes;
  bool strong = false;                 // a non-env signature matched
  std::map<std::string, int> support;  // symptom -> signatures that gave it weight
};

Scored score_tier(const std::vector<Hit>& hits, const Tables& t, bool fallback, size_t ev_max) {
  std::map<std::string, Candidate> sym, rc;
  Scored out;
  for (size_t i = 0; i < t.signatures.size(); ++i) {
    const auto& h = hits[i];
    const auto& s = t.signatures[i];
    if (h.lines.empty() || s.fallback != fallback) continue;
    // Further distinct lines of one signature add a little: ten watchdog lines are one fact.
    const double scale = 1.0 + 0.25 * static_cast<double>(h.lines.size() - 1);
    if (!s.env) out.strong = true;
    for (const auto& [id, w] : s.symptoms) {
      add_candidate(sym, id, w * scale, h.lines, s.reinfer);
      ++out.support[id];
    }
    for (const auto& [id, w] : s.root_causes) add_candidate(rc, id, w * scale, h.lines);
  }
  out.symptoms = ranked(std::move(sym), ev_max);
  out.root_causes = ranked(std::move(rc), ev_max);
  return out;
}

// Which tier answers: the tables with an error text (their threshold), the tables with context
// lines only (weak), else the learned words when two or more agree (weak), else none.
void decide(Result& r, const std::vector<Hit>& hits, const Tables& t, const Options& o) {
  Scored main = score_tier(hits, t, false, o.evidence_per_candidate);
  const double top = main.symptoms.empty() ? 0 : main.symptoms.front().score;
  r.symptoms = std::move(main.symptoms);
  r.root_causes = std::move(main.root_causes);
  if (top >= o.min_score) {
    r.basis =
        main.strong || top >= 2 * o.min_score ? Result::Basis::kTables : Result::Basis::kContext;
  } else {
    Scored learned = score_tier(hits, t, true, o.evidence_per_candidate);
    const bool agreed = !learned.symptoms.empty() &&
                        learned.symptoms.front().score >= o.min_score &&
                        learned.support[learned.symptoms.front().id] >= 2;
    if (!agreed) {
      r.kind = Result::Kind::kNone;
      r.why = r.symptoms.empty() ? "no signature matched"
                                 : fmt::format("the best match ({} {:.2f}) is below the threshold",
                                               r.symptoms.front().id, r.symptoms.front().score);
      return;
    }
    r.basis = Result::Basis::kLearned;
    r.symptoms = std::move(learned.symptoms);
    r.root_causes = std::move(learned.root_causes);
  }
  r.kind = Result::Kind::kFound;
  r.stage = t.taxonomy.symptom_stage.at(r.symptoms.front().id);
}

// What the env rules read into Result::env: the first line that gives a key (another setting of
// its config gives none: ConfigRead::says_otherwise), and for `count: lines` the distinct values.
class EnvRead {
 public:
  // Whether rule `e` still reads lines: a key is read once, a key counted over lines on each.
  bool wants(const EnvRule& e) const {
    return e.count == EnvRule::Count::kLines || seen_.count(e.key) == 0;
  }

  void add(const EnvRule& e, std::string value, size_t line, const std::string& text, Result& r) {
    if (e.count == EnvRule::Count::kLines) {
      auto& [values, last] = counted_[e.key];
      if (values.insert(std::move(value)).second) last = {e.key, "", line, text};
      return;
    }
    if (e.count == EnvRule::Count::kItems) {
      const auto items = std::count(value.begin(), value.end(), ',') + 1;
      value = std::to_string(items);
    }
    seen_.insert(e.key);
    r.env.push_back({e.key, std::move(value), line, text});
  }

  // The counted keys no line stated: a line that states the key wins over a list.
  void finish(Result& r) {
    for (auto& [key, counted] : counted_) {
      if (seen_.count(key)) continue;
      counted.second.value = std::to_string(counted.first.size());
      r.env.push_back(std::move(counted.second));
    }
  }

 private:
  std::set<std::string> seen_;
  // `count` rules, by key: the distinct values, and the last line that added one.
  std::map<std::string, std::pair<std::set<std::string>, EnvFact>> counted_;
};

}  // namespace

Result triage(const Input& in, const Tables& t, const Options& o) {
  Result r;
  r.truncated = in.truncated;
  if (in.text.find_first_not_of(" \t\r\n") == std::string::npos) {
    r.kind = Result::Kind::kEmpty;
    r.why = "the input is empty";
    return r;
  }
  if (auto why = binary_reason(in.text); !why.empty()) {
    r.kind = Result::Kind::kBinary;
    r.why = why;
    return r;
  }
  std::vector<Hit> hits(t.signatures.size());
  RankInput rank_in{{}, false, false, in.text, o.self_id, {}};  // the ranker reads the text too
  const size_t first_cue = t.signatures.size() + t.env_rules.size();
  std::vector<std::set<std::string>> seen_text(t.signatures.size());
  // Lines a row's regex already rejected: a log repeats its lines, and std::regex is slow.
  std::vector<std::unordered_set<std::string>> rejected(t.signatures.size() + t.env_rules.size());
  EnvRead env;
  const ConfigRead configs(in.text, t, o);
  MaskedLine masked;  // the line rows of ordinary words read (scan.hpp)
  r.lines = static_cast<size_t>(std::count(in.text.begin(), in.text.end(), '\n')) +
            (in.text.back() == '\n' ? 0 : 1);
  const std::vector<NeedleHit> candidates = needle_hits(in.text, t);
  std::vector<size_t> left(first_cue, 0), tried(first_cue, 0);  // per row
  for (const auto& c : candidates) left[c.row] += c.row < first_cue;
  for (const auto& c : candidates) {
    if (c.row < first_cue) {
      const bool env_row = c.row >= t.signatures.size();
      const size_t remaining = left[c.row]--;
      if (env_row ? tried[c.row]++ >= o.max_regex_lines : remaining > o.max_regex_lines) continue;
    }
    std::string text = in.text.substr(c.start, std::min<size_t>(c.end - c.start, 4096));
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (c.row >= first_cue) {
      rank_in.cues.push_back({c.row - first_cue, c.line, std::move(text)});
      continue;
    }
    if (c.row < t.signatures.size()) {
      const auto& s = t.signatures[c.row];
      auto& h = hits[c.row];
      if (static_cast<int>(h.lines.size()) >= o.max_hits || seen_text[c.row].count(text)) continue;
      if (rejected[c.row].count(text)) continue;
      if (!signature_matches(s, text, c.line, masked)) {
        rejected[c.row].insert(std::move(text));
        continue;
      }
      seen_text[c.row].insert(text);  // a repeated identical line counts once
      h.lines.push_back({c.line, text, s.id});
      continue;
    }
    const auto& e = t.env_rules[c.row - t.signatures.size()];
    std::smatch m;
    if (!env.wants(e) || rejected[c.row].count(text)) continue;
    if (!regex_find(text, m, e.regex)) {
      rejected[c.row].insert(std::move(text));
      continue;
    }
    if (!configs.says_otherwise(c.line, e.key)) env.add(e, m[1].str(), c.line, text, r);
  }
  env.finish(r);
  configs.add_facts(r);
  std::sort(r.env.begin(), r.env.end(),
            [](const EnvFact& a, const EnvFact& b) { return a.line < b.line; });
  apply_context_rows(hits, t);  // a context row counts only with its error row on another line
  for (size_t i = 0; i < hits.size(); ++i) {
    if (hits[i].lines.empty()) continue;
    rank_in.table_match = true;
    rank_in.error_text = rank_in.error_text || !t.signatures[i].env;
  }
  rank_in.table_match = rank_in.table_match || !r.env.empty();
  decide(r, hits, t, o);
  apply_ranker(r, rank_in, t);
  return r;
}

}  // namespace fl::triage
