#include "harness/triage/ranker_words.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/triage/triage.hpp"
#include "harness/triage/yaml_file.hpp"

namespace fl::triage {

namespace {

double number(const std::string& file, const YAML::Node& n, const std::string& what) {
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    fail_at(file, n, fmt::format("{}: not a number", what));
  }
  if (!std::isfinite(v)) fail_at(file, n, fmt::format("{}: must be a finite number", what));
  return v;
}

size_t at(WordLabel k) {
  return static_cast<size_t>(k);
}

// label -> count, each label checked against the taxonomy.
std::map<std::string, double> label_row(const std::string& file, const YAML::Node& n,
                                        const std::string& what, const Taxonomy& t,
                                        WordLabel kind) {
  if (!n.IsMap()) fail_at(file, n, fmt::format("{}: must map labels to counts", what));
  std::map<std::string, double> out;
  for (const auto& kv : n) {
    const auto id = kv.first.as<std::string>();
    const bool ok = kind == WordLabel::kStage     ? id.size() == 1 && id[0] >= '1' && id[0] <= '5'
                    : kind == WordLabel::kSymptom ? t.symptom_name.count(id) > 0
                                                  : t.root_cause_name.count(id) > 0;
    if (!ok) fail_at(file, kv.first, fmt::format("{}: '{}' is not in the taxonomy", what, id));
    out[id] = number(file, kv.second, what + ": " + id);
  }
  return out;
}

void word_rows(const std::string& file, const YAML::Node& n, const std::string& what,
               const Taxonomy& t, WordLabel kind, WordModel& m) {
  if (!n) return;
  if (!n.IsMap()) fail_at(file, n, fmt::format("{}: must map words to labels", what));
  for (const auto& kv : n) {
    const auto word = kv.first.as<std::string>();
    auto row = label_row(file, kv.second, what, t, kind);
    for (const auto& [id, c] : row) m.sums[at(kind)][id] += c;
    m.rows[at(kind)][word] = std::move(row);
  }
}

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// log P(w | label) with add-alpha smoothing over the vocabulary.
double log_p(const WordModel& m, WordLabel kind, const std::string& label, const std::string& word,
             double alpha) {
  const auto& rows = m.rows[at(kind)];
  const auto& sums = m.sums[at(kind)];
  const double vocab = static_cast<double>(m.rows[at(WordLabel::kStage)].size());
  double n = 0;
  if (const auto it = rows.find(word); it != rows.end()) {
    if (const auto c = it->second.find(label); c != it->second.end()) n = c->second;
  }
  const auto s = sums.find(label);
  return std::log((n + alpha) / ((s == sums.end() ? 0 : s->second) + alpha * vocab));
}

// Stop 52: logistic_bias (kind -> label -> bias) and logistic_<kind> (word -> label -> weight; a
// weight left out is 0). A kind with a bias row is scored by the regression.
void load_logistic(const std::string& file, const YAML::Node& doc, const Taxonomy& t,
                   const std::pair<WordLabel, const char*> (&kinds)[3], WordModel& m) {
  const YAML::Node bias = doc["logistic_bias"];
  if (!bias) {
    for (const auto& [kind, name] : kinds) {
      const auto key = fmt::format("logistic_{}", name);
      if (doc[key])
        fail_at(file, doc[key], fmt::format("{}: no logistic_bias row for {}", key, name));
    }
    return;
  }
  if (!bias.IsMap()) fail_at(file, bias, "logistic_bias: must map kinds to labels");
  check_keys(file, bias, {"symptoms", "stages", "root_causes"}, "logistic_bias");
  for (const auto& [kind, name] : kinds) {
    const auto key = fmt::format("logistic_{}", name);
    if (!bias[name]) {
      if (doc[key])
        fail_at(file, doc[key], fmt::format("{}: no logistic_bias row for {}", key, name));
      continue;
    }
    m.bias[at(kind)] = label_row(file, bias[name], fmt::format("logistic_bias: {}", name), t, kind);
    const YAML::Node rows = doc[key];
    if (!rows || rows.IsNull()) continue;  // no weight kept: the bias alone
    if (!rows.IsMap()) fail_at(file, rows, fmt::format("{}: must map words to labels", key));
    for (const auto& kv : rows) {
      auto row = label_row(file, kv.second, key, t, kind);
      for (const auto& [id, w] : row)
        if (!m.bias[at(kind)].count(id))
          fail_at(file, kv.second, fmt::format("{}: '{}' has no bias", key, id));
      m.weights[at(kind)][kv.first.as<std::string>()] = std::move(row);
    }
  }
}

// softmax(bias + the weights of the words) over the labels of the bias row.
std::map<std::string, double> logistic_posterior(const WordModel& m, WordLabel kind,
                                                 const std::vector<WordHit>& words) {
  std::map<std::string, double> out = m.bias[at(kind)];
  for (const auto& w : words) {
    const auto it = m.weights[at(kind)].find(w.word);
    if (it == m.weights[at(kind)].end()) continue;
    for (const auto& [id, x] : it->second) out[id] += x;
  }
  double best = -1e300, z = 0;
  for (const auto& [id, s] : out) best = std::max(best, s);
  for (auto& [id, s] : out) z += (s = std::exp(s - best));
  for (auto& [id, s] : out) s /= z;
  return out;
}

}  // namespace

namespace {

// Whether `id` is a label of `kind` in the taxonomy.
bool known_label(const Taxonomy& t, WordLabel kind, const std::string& id) {
  return kind == WordLabel::kStage     ? id.size() == 1 && id[0] >= '1' && id[0] <= '5'
         : kind == WordLabel::kSymptom ? t.symptom_name.count(id) > 0
                                       : t.root_cause_name.count(id) > 0;
}

// `  "KEY": {"LABEL": N, ...}` (a generated row) as KEY and its labels; false for another shape, a
// label `kind` does not have or a count that is not a finite number.
bool generated_row(const std::string& line, const Taxonomy& t, WordLabel kind, std::string& key,
                   std::map<std::string, double>& row) {
  if (line.size() < 4 || line.compare(0, 3, "  \"") != 0) return false;
  const auto j = nlohmann::json::parse("{" + line.substr(2) + "}", nullptr, false);
  if (j.is_discarded() || j.size() != 1 || !j.begin().value().is_object()) return false;
  key = j.begin().key();
  row.clear();
  for (const auto& [id, v] : j.begin().value().items()) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !known_label(t, kind, id)) {
      return false;
    }
    row[id] = v.get<double>();
  }
  return true;
}

}  // namespace

// learn_ranker.py writes words.yaml in one shape: comment lines, `issues: N`, then `classes:` and
// `word_<kind>:` sections of one `  "KEY": {JSON object}` line each. Read line by line, the 12,000
// rows load in tens of milliseconds; yaml-cpp took 0.5 s of every `faultline triage` (stop 72).
// Anything else (the logistic sections, a hand-edited block mapping, a bad label or number) is
// left to the YAML reader, which says where and what is wrong.
bool load_generated_word_model(const std::string& text, const Taxonomy& t, WordModel& m) {
  WordModel out;
  std::istringstream in(text);
  const std::pair<WordLabel, const char*> kinds[] = {{WordLabel::kSymptom, "symptoms"},
                                                     {WordLabel::kStage, "stages"},
                                                     {WordLabel::kRootCause, "root_causes"}};
  std::string section, key;
  std::map<std::string, double> row;
  bool classes = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {  // a section, or `issues: N`
      if (line.rfind("issues: ", 0) == 0) {
        char* end = nullptr;
        const long n = std::strtol(line.c_str() + 8, &end, 10);
        if (end == line.c_str() + 8 || *end != '\0' || n < 0) return false;
        out.issues = static_cast<int>(n);
        section.clear();
        continue;
      }
      section = line;
      if (section != "classes:" && section != "word_symptoms:" && section != "word_stages:" &&
          section != "word_root_causes:") {
        return false;
      }
      classes = classes || section == "classes:";
      continue;
    }
    if (section == "classes:") {
      const auto kind = std::find_if(std::begin(kinds), std::end(kinds), [&](const auto& k) {
        return line.rfind(fmt::format("  \"{}\":", k.second), 0) == 0;
      });
      if (kind == std::end(kinds) || !generated_row(line, t, kind->first, key, row)) return false;
      out.classes[at(kind->first)] = row;
      continue;
    }
    const auto kind = std::find_if(std::begin(kinds), std::end(kinds), [&](const auto& k) {
      return section == fmt::format("word_{}:", k.second);
    });
    if (kind == std::end(kinds) || !generated_row(line, t, kind->first, key, row)) return false;
    const size_t k = at(kind->first);
    for (const auto& [id, c] : row) out.sums[k][id] += c;
    out.rows[k][key] = row;
  }
  if (!classes || out.classes[at(WordLabel::kSymptom)].empty() ||
      out.classes[at(WordLabel::kStage)].empty()) {
    return false;
  }
  out.loaded = !out.rows[at(WordLabel::kStage)].empty();
  m = std::move(out);
  return true;
}

void load_word_model(const std::string& file, const Taxonomy& t, WordModel& m) {
  if (!std::filesystem::exists(file)) return;
  std::ifstream f(file, std::ios::binary);
  std::ostringstream text;
  text << f.rdbuf();
  if (f && load_generated_word_model(text.str(), t, m)) return;
  load_word_model_yaml(file, t, m);
}

void load_word_model_yaml(const std::string& file, const Taxonomy& t, WordModel& m) {
  const YAML::Node doc = load_yaml(file, "ranker file");
  check_keys(file, doc,
             {"issues", "classes", "word_symptoms", "word_stages", "word_root_causes",
              "logistic_bias", "logistic_symptoms", "logistic_stages", "logistic_root_causes"},
             "file");
  if (doc["issues"]) m.issues = static_cast<int>(number(file, doc["issues"], "issues"));
  const YAML::Node classes = doc["classes"];
  if (!classes || !classes.IsMap()) fail_at(file, doc, "classes: must map symptoms and stages");
  check_keys(file, classes, {"symptoms", "stages", "root_causes"}, "classes");
  const std::pair<WordLabel, const char*> kinds[] = {{WordLabel::kSymptom, "symptoms"},
                                                     {WordLabel::kStage, "stages"},
                                                     {WordLabel::kRootCause, "root_causes"}};
  for (const auto& [kind, name] : kinds) {
    if (kind != WordLabel::kRootCause || classes[name])
      m.classes[at(kind)] =
          label_row(file, classes[name], fmt::format("classes: {}", name), t, kind);
    const auto key = fmt::format("word_{}", name);
    word_rows(file, doc[key], key, t, kind, m);
  }
  load_logistic(file, doc, t, kinds, m);
  m.loaded = !m.rows[at(WordLabel::kStage)].empty();
}

// The parts of a compound identifier as learn_tokens.py's IDENT_PART finds them
// (`[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+`): a capital and its lower-case run, a lower-case run, a
// run of capitals not followed by a lower-case letter (the last capital of `HTTPServer` starts
// `Server`), a run of digits; '_' separates. Lower-cased; `word` is ASCII letters, digits and '_'.
std::vector<std::string> identifier_parts(std::string_view word) {
  const auto upper = [&](size_t i) {
    return i < word.size() && std::isupper(static_cast<unsigned char>(word[i]));
  };
  const auto lower = [&](size_t i) {
    return i < word.size() && std::islower(static_cast<unsigned char>(word[i]));
  };
  const auto digit = [&](size_t i) {
    return i < word.size() && std::isdigit(static_cast<unsigned char>(word[i]));
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < word.size();) {
    size_t j = i;
    if (lower(i) || (upper(i) && lower(i + 1))) {
      j = i + 1;
      while (lower(j)) ++j;
    } else if (upper(i)) {
      while (upper(j)) ++j;
      if (lower(j)) --j;  // that capital begins the next part
    } else if (digit(i)) {
      while (digit(j)) ++j;
    } else {
      ++i;  // '_'
      continue;
    }
    out.push_back(ascii_lower(word.substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<WordHit> known_words(std::string_view text, size_t max_bytes,
                                 const std::function<bool(const std::string&)>& known, bool parts) {
  std::vector<WordHit> out;
  text = text.substr(0, std::min(text.size(), max_bytes));
  std::unordered_set<std::string> seen;
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\n') {
      ++line;
      line_start = ++i;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < text.size() && j - i < 40 && token_char(text[j])) ++j;
    if (j - i < 3) {  // as Python's findall: try again from the next byte
      ++i;
      continue;
    }
    const std::string_view token = text.substr(i, j - i);
    i = j;
    std::vector<std::string> words{ascii_lower(token)};
    if (parts) {
      auto p = identifier_parts(token);
      if (p.size() >= 2) words.insert(words.end(), p.begin(), p.end());
    }
    for (auto& w : words) {
      if (!known(w) || !seen.insert(w).second) continue;
      const size_t end = std::min(text.find('\n', line_start), text.size());
      out.push_back({std::move(w), line, std::string(text.substr(line_start, end - line_start))});
    }
  }
  return out;
}

std::vector<WordHit> vocabulary_words(std::string_view text, const WordModel& m, size_t max_bytes) {
  if (!m.loaded) return {};
  const auto& vocab = m.rows[at(WordLabel::kStage)];
  return known_words(
      text, max_bytes, [&](const std::string& w) { return vocab.count(w) > 0; }, true);
}

std::map<std::string, double> word_posterior(const WordModel& m, WordLabel kind,
                                             const std::vector<WordHit>& words, double alpha,
                                             double mix_power) {
  const auto& labels = m.classes[at(kind)];
  double n = 0;
  for (const auto& [id, c] : labels) n += c;
  std::map<std::string, double> out;
  if (n <= 0) return out;
  double best = -1e300;
  for (const auto& [id, c] : labels) {
    double s = std::log(c / n);
    for (const auto& w : words) s += log_p(m, kind, id, w.word, alpha);
    out[id] = s;
    best = std::max(best, s);
  }
  double z = 0;
  for (auto& [id, s] : out) z += (s = std::exp(s - best));
  for (auto& [id, s] : out) s /= z;
  if (m.bias[at(kind)].empty()) return out;
  // Stop 52: the mean of the naive Bayes's and the logistic regression's posteriors.
  auto lr = logistic_posterior(m, kind, words);
  for (auto& [id, p] : lr) p = 0.5 * (p + (out.count(id) ? out.at(id) : 0.0));
  for (const auto& [id, p] : out)
    if (!lr.count(id)) lr[id] = 0.5 * p;
  if (mix_power != 1.0) {  // stop 53: as sharp as the naive Bayes's (cues.yaml nb_mix_power)
    double zp = 0;
    for (auto& [id, p] : lr) zp += (p = std::pow(p, mix_power));
    for (auto& [id, p] : lr) p = zp > 0 ? p / zp : 0.0;
  }
  return lr;
}

std::vector<const WordHit*> carrying_words(const WordModel& m, WordLabel kind,
                                           const std::string& label,
                                           const std::vector<WordHit>& words, double alpha,
                                           size_t n) {
  const auto& rows = m.rows[at(kind)];
  double all = 0;
  for (const auto& [id, s] : m.sums[at(kind)]) all += s;
  const double vocab = static_cast<double>(m.rows[at(WordLabel::kStage)].size());
  std::vector<std::pair<double, const WordHit*>> lift;
  for (const auto& w : words) {
    const auto it = rows.find(w.word);
    if (it == rows.end() || !it->second.count(label)) continue;
    double in_all = 0;
    for (const auto& [id, c] : it->second) in_all += c;
    const double pooled = std::log((in_all + alpha) / (all + alpha * vocab));
    const double l = log_p(m, kind, label, w.word, alpha) - pooled;
    if (l > 0) lift.emplace_back(l, &w);
  }
  std::stable_sort(lift.begin(), lift.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const WordHit*> out;
  for (size_t i = 0; i < lift.size() && i < n; ++i) out.push_back(lift[i].second);
  return out;
}

}  // namespace fl::triage
