#include "harness/triage/ranker_neighbours.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/triage/triage.hpp"

namespace fl::triage {

namespace {

constexpr const char* kFormat = "faultline-neighbours 1";
constexpr double kBm25K1 = 1.2, kBm25B = 0.75;

[[noreturn]] void fail_line(const std::string& file, size_t line, const std::string& what) {
  throw SignatureError(fmt::format("{}:{}: {}", file, line, what));
}

// The value of `key` in line `line`'s object, of type T.
template <typename T>
T field(const std::string& file, size_t line, const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) fail_line(file, line, fmt::format("{}: missing", key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail_line(file, line, fmt::format("{}: not a valid value", key));
  }
}

NeighbourIssue issue_of(const std::string& file, size_t line, const nlohmann::json& j,
                        const Taxonomy& t, NeighbourModel& m) {
  for (const auto& [key, v] : j.items()) {
    static const std::set<std::string> known = {"id",    "url",        "summary", "symptoms",
                                                "stage", "root_cause", "tokens"};
    if (!known.count(key)) fail_line(file, line, fmt::format("{}: not a key of an issue", key));
  }
  NeighbourIssue is;
  is.id = field<std::string>(file, line, j, "id");
  is.url = field<std::string>(file, line, j, "url");
  if (j.contains("summary")) is.summary = field<std::string>(file, line, j, "summary");
  is.symptoms = field<std::vector<std::string>>(file, line, j, "symptoms");
  is.stage = field<int>(file, line, j, "stage");
  is.root_cause = field<std::string>(file, line, j, "root_cause");
  if (is.stage != 0 && !t.stage_name.count(is.stage))
    fail_line(file, line, fmt::format("stage: {} is not in the taxonomy", is.stage));
  if (is.symptoms.empty()) fail_line(file, line, "symptoms: empty");
  for (const auto& s : is.symptoms) {
    if (s != "none" && !t.symptom_name.count(s))
      fail_line(file, line, fmt::format("symptoms: '{}' is not a symptom of the taxonomy", s));
  }
  if (is.root_cause != "none" && !t.root_cause_name.count(is.root_cause))
    fail_line(file, line, fmt::format("root_cause: '{}' is not in the taxonomy", is.root_cause));
  const auto words = field<std::string>(file, line, j, "tokens");
  std::unordered_set<uint32_t> seen;
  for (size_t i = 0; i < words.size();) {
    const size_t end = std::min(words.find(' ', i), words.size());
    const std::string w = words.substr(i, end - i);
    i = end + 1;
    if (w.empty()) continue;
    if (w != ascii_lower(w))
      fail_line(file, line, fmt::format("tokens: '{}' is not lower-case", w));
    const auto [it, fresh] = m.vocab.try_emplace(w, static_cast<uint32_t>(m.vocab_words.size()));
    if (fresh) m.vocab_words.push_back(w);
    if (seen.insert(it->second).second) is.words.push_back(it->second);
  }
  return is;
}

// Document frequencies, idf, postings and each issue's norm, from the issues' words.
void index_model(NeighbourModel& m) {
  const size_t v = m.vocab_words.size();
  const auto n = static_cast<double>(m.issues.size());
  m.postings.assign(v, {});
  double sum = 0;
  for (size_t i = 0; i < m.issues.size(); ++i) {
    for (uint32_t w : m.issues[i].words) m.postings[w].push_back(static_cast<uint32_t>(i));
    sum += static_cast<double>(m.issues[i].words.size());
  }
  m.mean_words = m.issues.empty() ? 0 : sum / n;
  m.idf.resize(v);
  m.bm25_idf.resize(v);
  for (size_t w = 0; w < v; ++w) {
    const auto df = static_cast<double>(m.postings[w].size());
    m.idf[w] = std::log((n + 1) / (df + 1)) + 1;
    m.bm25_idf[w] = std::log(1 + (n - df + 0.5) / (df + 0.5));
  }
  for (const auto& is : m.issues)
    if (is.stage > 0) m.stage_share[std::to_string(is.stage)] += 1 / n;
  for (auto& is : m.issues) {
    double s = 0;
    for (uint32_t w : is.words) s += m.idf[w] * m.idf[w];
    is.norm = std::sqrt(s);
  }
}

}  // namespace

void load_neighbours(const std::string& file, const Taxonomy& t, NeighbourModel& m) {
  if (!std::filesystem::exists(file)) return;
  std::ifstream in(file);
  if (!in) throw SignatureError(fmt::format("{}: cannot read the ranker file", file));
  std::string text;
  size_t line = 0, want_issues = 0, want_tokens = 0, tokens = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      fail_line(file, line, "not a JSON object");
    }
    if (!j.is_object()) fail_line(file, line, "not a JSON object");
    if (line == 1) {
      if (field<std::string>(file, line, j, "format") != kFormat)
        fail_line(file, line, fmt::format("format: not '{}'", kFormat));
      want_issues = field<size_t>(file, line, j, "issues");
      want_tokens = field<size_t>(file, line, j, "tokens");
      continue;
    }
    m.issues.push_back(issue_of(file, line, j, t, m));
    tokens += m.issues.back().words.size();
  }
  if (line == 0) fail_line(file, 1, "format: missing (an empty file)");
  if (m.issues.size() != want_issues || tokens != want_tokens)
    fail_line(
        file, 1,
        fmt::format("issues: the header says {} issues and {} tokens, the file holds {} and {}",
                    want_issues, want_tokens, m.issues.size(), tokens));
  index_model(m);
  m.loaded = !m.issues.empty();
}

std::vector<WordHit> neighbour_words(std::string_view text, const NeighbourModel& m,
                                     size_t max_bytes) {
  if (!m.loaded) return {};
  return known_words(
      text, max_bytes, [&](const std::string& w) { return m.vocab.count(w) > 0; }, false);
}

std::vector<SimilarIssue> nearest_issues(const NeighbourModel& m, const std::vector<WordHit>& words,
                                         size_t k, bool bm25, const std::string& skip_id) {
  std::vector<SimilarIssue> out;
  if (!m.loaded || k == 0 || words.empty()) return out;
  std::vector<double> score(m.issues.size(), 0.0);
  std::vector<uint32_t> q;
  double qn = 0;
  for (const auto& h : words) {
    const uint32_t w = m.vocab.at(h.word);
    q.push_back(w);
    qn += m.idf[w] * m.idf[w];
    for (uint32_t i : m.postings[w]) {
      if (!bm25) {
        score[i] += m.idf[w] * m.idf[w];
        continue;
      }
      const double len = static_cast<double>(m.issues[i].words.size()) / m.mean_words;
      score[i] += m.bm25_idf[w] * (kBm25K1 + 1) / (1 + kBm25K1 * (1 - kBm25B + kBm25B * len));
    }
  }
  qn = std::sqrt(qn);
  std::vector<std::pair<double, uint32_t>> ranked;
  for (size_t i = 0; i < score.size(); ++i) {
    if (score[i] <= 0 || m.issues[i].id == skip_id) continue;
    const double s = bm25 ? score[i] : score[i] / (qn * m.issues[i].norm);
    ranked.emplace_back(s, static_cast<uint32_t>(i));
  }
  const size_t n = std::min(k, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<long>(n), ranked.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  std::sort(q.begin(), q.end());
  for (size_t r = 0; r < n; ++r) {
    SimilarIssue s{&m.issues[ranked[r].second], ranked[r].first, {}};
    std::vector<uint32_t> shared;
    for (uint32_t w : s.issue->words)
      if (std::binary_search(q.begin(), q.end(), w)) shared.push_back(w);
    std::stable_sort(shared.begin(), shared.end(),
                     [&](uint32_t a, uint32_t b) { return m.idf[a] > m.idf[b]; });
    for (size_t i = 0; i < shared.size() && i < 5; ++i)
      s.shared.push_back(m.vocab_words[shared[i]]);
    out.push_back(std::move(s));
  }
  return out;
}

NeighbourVotes neighbour_votes(const std::vector<SimilarIssue>& nearest, size_t k) {
  NeighbourVotes v;
  double z = 0;
  for (size_t i = 0; i < nearest.size() && i < k; ++i) {
    const auto& s = nearest[i];
    v.voters.push_back(s);
    z += s.similarity;
    if (s.issue->stage == 0) continue;
    v.stage[std::to_string(s.issue->stage)] += s.similarity;
    for (size_t j = 0; j < s.issue->symptoms.size(); ++j) {
      if (s.issue->symptoms[j] != "none")
        v.symptom[s.issue->symptoms[j]] += (j == 0 ? 1.0 : 0.5) * s.similarity;
    }
  }
  if (z <= 0) return v;
  for (auto* m : {&v.stage, &v.symptom})
    for (auto& [id, x] : *m) x /= z;
  return v;
}

double stage_symptom_vote(const NeighbourVotes& v, const std::string& id, int stage) {
  double z = 0, mine = 0;
  for (const auto& [s, x] : v.symptom) {
    if (s.empty() || s[0] - '0' != stage) continue;
    z += x;
    if (s == id) mine = x;
  }
  return z > 0 ? mine / z : 0;
}

std::string vote_basis(const NeighbourVotes& v, const std::string& id, double share) {
  std::vector<std::string> who;
  for (const auto& s : v.voters) {
    const auto& sy = s.issue->symptoms;
    if (std::find(sy.begin(), sy.end(), id) != sy.end() && who.size() < 3)
      who.push_back(fmt::format("{} ({:.2f})", s.issue->id, s.similarity));
  }
  return fmt::format("similar labelled tune issues {} carry it: vote {:.2f} of the {} nearest",
                     fmt::join(who, ", "), share, v.voters.size());
}

std::vector<EvidenceLine> vote_evidence(const NeighbourVotes& v, const std::string& id, size_t n) {
  std::map<size_t, std::pair<std::string, std::vector<std::string>>> by_line;
  for (const auto& s : v.voters) {
    const auto& sy = s.issue->symptoms;
    if (std::find(sy.begin(), sy.end(), id) == sy.end()) continue;
    for (const auto& w : s.shared) {
      const auto h = std::find_if(v.words.begin(), v.words.end(),
                                  [&](const WordHit& x) { return x.word == w; });
      if (h == v.words.end()) continue;
      auto& [text, ws] = by_line[h->line];
      text = h->text;
      if (std::find(ws.begin(), ws.end(), w) == ws.end()) ws.push_back(w);
    }
  }
  std::vector<EvidenceLine> out;
  for (const auto& [line, tw] : by_line) {
    if (out.size() >= n) break;
    out.push_back({line, tw.first,
                   fmt::format("word{} '{}' shared with similar labelled issues",
                               tw.second.size() > 1 ? "s" : "", fmt::join(tw.second, "', '"))});
  }
  return out;
}

bool vote_first(Result& r, const NeighbourVotes& v, double min_share, double min_sim, int fill_to) {
  if ((min_share <= 0 && min_sim <= 0) || v.symptom.empty()) return false;
  if (!r.symptoms.empty() && r.symptoms.front().basis.empty()) return false;  // a table row's stays
  std::pair<double, std::string> top{-1, ""};
  for (const auto& [id, x] : v.symptom) top = std::max(top, std::pair{x, id});
  const NeighbourIssue& near = *v.voters.front().issue;
  if (min_sim > 0 && v.voters.front().similarity >= min_sim && near.symptoms.front() != "none")
    top = {v.symptom.at(near.symptoms.front()), near.symptoms.front()};
  else if (min_share <= 0 || top.first < min_share)
    return false;
  const auto at = std::find_if(r.symptoms.begin(), r.symptoms.end(),
                               [&](const Candidate& c) { return c.id == top.second; });
  if (at == r.symptoms.begin()) return false;
  Candidate c = at != r.symptoms.end()
                    ? std::move(*at)
                    : Candidate{top.second, top.first, vote_evidence(v, top.second, 4), ""};
  if (at != r.symptoms.end()) r.symptoms.erase(at);
  c.basis += fmt::format("{}first: {} (cues.yaml knn_first_min {:g}, knn_first_sim {:g})",
                         c.basis.empty() ? "" : "; ", vote_basis(v, top.second, top.first),
                         min_share, min_sim);
  r.symptoms.insert(r.symptoms.begin(), std::move(c));
  const auto n = static_cast<size_t>(std::max(fill_to, 1));
  if (r.symptoms.size() > n) r.symptoms.resize(n);
  return true;
}

std::string format_similar(const std::vector<SimilarIssue>& similar) {
  if (similar.empty()) return "";
  std::string out =
      "Similar labelled issues (the corpus's tune split, nearest by shared words; evidence, not "
      "the answer):\n";
  for (size_t i = 0; i < similar.size(); ++i) {
    const NeighbourIssue& is = *similar[i].issue;
    out += fmt::format("  {}. {} similarity {:.2f}: stage {}, symptoms {}, root cause {}\n", i + 1,
                       is.id, similar[i].similarity, is.stage, fmt::join(is.symptoms, "+"),
                       is.root_cause);
    if (!is.summary.empty()) out += fmt::format("       {}\n", is.summary);
    if (!is.url.empty()) out += fmt::format("       {}\n", is.url);
    out += fmt::format("       shared words: '{}'\n", fmt::join(similar[i].shared, "', '"));
  }
  return out;
}

void find_neighbours(Result& r, RankInput& in, const Ranker& k) {
  if (!k.neighbours.loaded || std::max(k.knn_show, k.knn_k) <= 0) return;
  const auto max_bytes = static_cast<size_t>(std::max(k.nb_max_bytes, 0));
  auto words = neighbour_words(in.text, k.neighbours, max_bytes);
  const auto near =
      nearest_issues(k.neighbours, words, static_cast<size_t>(std::max(k.knn_show, k.knn_k)),
                     k.knn_bm25, in.self_id);
  const size_t show = std::min(near.size(), static_cast<size_t>(std::max(k.knn_show, 0)));
  r.similar.assign(near.begin(), near.begin() + static_cast<long>(show));
  in.knn = neighbour_votes(near, static_cast<size_t>(std::max(k.knn_k, 0)));
  if (k.knn_stage_centred && !in.knn.voters.empty()) {  // the vote against the stage's share
    for (const auto& [st, share] : k.neighbours.stage_share) in.knn.stage[st] -= share;
  }
  in.knn.words = std::move(words);
}

}  // namespace fl::triage
