#include "harness/triage/ranker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "harness/triage/ranker_gate.hpp"
#include "harness/triage/scan.hpp"
#include "harness/triage/triage.hpp"

namespace fl::triage {

namespace {

int stage_of_id(const std::string& id) {  // "4.11" or "R4.6" -> 4
  const size_t i = !id.empty() && id[0] == 'R' ? 1 : 0;
  return id.size() > i && std::isdigit(static_cast<unsigned char>(id[i])) ? id[i] - '0' : 0;
}

double total(const std::map<std::string, double>& m) {
  double n = 0;
  for (const auto& [id, c] : m) n += c;
  return n;
}

const std::map<std::string, double>& row(const Counts& c, const std::string& key) {
  static const std::map<std::string, double> empty;
  const auto it = c.find(key);
  return it == c.end() ? empty : it->second;
}

bool has(const std::vector<Candidate>& cs, const std::string& id) {
  return std::any_of(cs.begin(), cs.end(), [&](const Candidate& c) { return c.id == id; });
}

struct StageGuess {
  int stage = 0;
  int second = 0;                      // the runner-up stage with any score (0: none)
  std::vector<EvidenceLine> evidence;  // the lines that point at `stage`
  std::vector<EvidenceLine> second_evidence;
  // symptom_words found: symptom -> summed weight, and the lines and words behind it
  std::map<std::string, double> symptom_words;
  std::map<std::string, std::vector<EvidenceLine>> symptom_evidence;
  // The learned word ranker: the input's vocabulary words and its posteriors (empty when off).
  std::vector<WordHit> words;
  std::map<std::string, double> nb_stage, nb_symptom, nb_root_cause;
  std::vector<FrameHit> frames;               // stop 53: the input's traceback frames
  std::map<std::string, double> frame_stage;  // and P(stage | frames) (empty when off)
  // Stop 52, an inferred stage with a weak_* setting on: each stage's score with the learned words
  // and the prior (`total`), without them (`own`), and the lines behind it.
  std::map<int, double> total, own;
  std::map<int, std::vector<EvidenceLine>> stage_ev;
  std::vector<EvidenceLine> answer_ev;  // the failure and context words' lines
  NeighbourVotes knn;                   // stop 53: the nearest tune issues' votes (inferred only)
};

bool weak_settings(const Ranker& k) {
  return k.weak_margin >= 0 || k.weak_nb_order_min > 0;
}

// The lines of the learned words that point at `label` most, each naming its words.
std::vector<EvidenceLine> learned_evidence(const StageGuess& g, const Ranker& k, WordLabel kind,
                                           const std::string& label) {
  std::map<size_t, std::pair<std::string, std::vector<std::string>>> by_line;
  for (const WordHit* w : carrying_words(k.words, kind, label, g.words, k.nb_alpha, 3)) {
    auto& [text, ws] = by_line[w->line];
    text = w->text;
    ws.push_back(w->word);
  }
  std::vector<EvidenceLine> out;
  for (const auto& [line, tw] : by_line) {
    out.push_back({line, tw.first,
                   fmt::format("learned word{} '{}' (naive Bayes, tune split)",
                               tw.second.size() > 1 ? "s" : "", fmt::join(tw.second, "', '"))});
  }
  return out;
}

// The learned words of the input, and what they say of the stage and the symptom.
void read_words(StageGuess& g, const RankInput& in, const Ranker& k) {
  if (!k.words.loaded || (k.nb_stage_weight <= 0 && k.nb_fill_weight <= 0 && k.nb_cross_min <= 0 &&
                          k.nb_cross_tables_max < 0 && k.nb_root_cause_weight <= 0))
    return;
  g.words = vocabulary_words(in.text, k.words, static_cast<size_t>(std::max(k.nb_max_bytes, 0)));
  g.nb_stage = word_posterior(k.words, WordLabel::kStage, g.words, k.nb_alpha, k.nb_mix_power);
  g.nb_symptom = word_posterior(k.words, WordLabel::kSymptom, g.words, k.nb_alpha, k.nb_mix_power);
  if (k.nb_root_cause_weight > 0)
    g.nb_root_cause =
        word_posterior(k.words, WordLabel::kRootCause, g.words, k.nb_alpha, k.nb_mix_power);
}

// Each stage's score: its words (each counts once) and the scores of the tables' candidates.
std::map<int, double> stage_scores(const Result& r, const RankInput& in, const Ranker& k) {
  std::map<int, double> score;
  std::set<size_t> seen;
  for (const auto& h : in.cues) {
    const Cue& c = k.cues[h.cue];
    if (c.kind == Cue::Kind::kStage && seen.insert(h.cue).second) score[c.stage] += c.weight;
  }
  for (const auto& c : r.symptoms) score[stage_of_id(c.id)] += k.table_stage_weight * c.score;
  return score;
}

// The best-scoring stage but `skip`: its score plus stage_prior_weight times the log of its share
// of tune failures against the largest stage's (0 for the largest stage, below 0 for the others);
// a tie goes to the stage with more tune issues. With `need_score`, a stage whose own score is not
// above 0 is never chosen.
int best_stage(std::map<int, double>& score, const Ranker& k, int skip, bool need_score) {
  double n_max = 0;
  for (const auto& [key, tally] : k.stage_symptoms) n_max = std::max(n_max, total(tally));
  int out = 0;
  double best = -1e9, best_n = -1;
  for (const auto& [key, tally] : k.stage_symptoms) {
    const int st = stage_of_id(key);
    const double n = total(tally);
    const double s = score[st] + k.stage_prior_weight * std::log((n + 1) / (n_max + 1));
    if (st == 0 || st == skip || (need_score && score[st] <= 0)) continue;
    if (s > best || (s == best && n > best_n)) {
      out = st;
      best = s;
      best_n = n;
    }
  }
  return out;
}

// The lines behind `stage`: its words, the tables' candidates of that stage and the `learned`
// words' lines; else the failure and context words.
std::vector<EvidenceLine> stage_evidence(int stage, const Result& r, const RankInput& in,
                                         const Ranker& k, std::vector<EvidenceLine> learned) {
  std::vector<EvidenceLine> out;
  std::map<size_t, std::pair<std::string, std::vector<std::string>>> words;  // line -> words
  for (const auto& h : in.cues) {
    const Cue& c = k.cues[h.cue];
    if (c.kind != Cue::Kind::kStage || c.stage != stage) continue;
    auto& [text, ws] = words[h.line];
    text = h.text;
    if (std::find(ws.begin(), ws.end(), c.word) == ws.end()) ws.push_back(c.word);
  }
  for (const auto& [line, tw] : words) {
    out.push_back({line, tw.first,
                   fmt::format("stage-{} word{} '{}'", stage, tw.second.size() > 1 ? "s" : "",
                               fmt::join(tw.second, "', '"))});
  }
  for (const auto& c : r.symptoms) {
    if (stage_of_id(c.id) == stage) out.insert(out.end(), c.evidence.begin(), c.evidence.end());
  }
  out.insert(out.end(), learned.begin(), learned.end());
  if (!out.empty()) return out;
  for (const auto& h : in.cues) {
    const Cue& c = k.cues[h.cue];
    if (c.kind != Cue::Kind::kFailure && c.kind != Cue::Kind::kContext) continue;
    const char* kind = c.kind == Cue::Kind::kFailure ? "failure" : "context";
    out.push_back({h.line, h.text, fmt::format("{} word '{}'", kind, c.word)});
  }
  return out;
}

// The stage of the answer (`found`: the tables' answer's stage, else inferred) and the runner-up.
StageGuess guess_stage(const Result& r, const RankInput& in, const Ranker& k, int found) {
  auto score = stage_scores(r, in, k);
  StageGuess g;
  read_words(g, in, k);
  // The learned words lean every stage; a runner-up still needs words or table matches of its own.
  auto leaned = score;
  for (const auto& [st, p] : g.nb_stage) {
    leaned[st[0] - '0'] += k.nb_stage_weight * p;
    if (score[st[0] - '0'] > 0) score[st[0] - '0'] += k.nb_stage_weight * p;
  }
  g.frame_stage = read_frames(in.text, k, g.frames);  // stop 53: frames lean an inferred stage
  for (const auto& [st, p] : g.frame_stage) leaned[st[0] - '0'] += k.frames_stage_weight * p;

  if (found == 0) g.knn = in.knn;  // stop 53: the nearest labelled tune issues vote too
  for (const auto& [st, x] : g.knn.stage) {
    leaned[st[0] - '0'] += k.knn_stage_weight * x;
    if (score[st[0] - '0'] > 0) score[st[0] - '0'] += k.knn_stage_weight * x;
  }
  g.stage = found > 0 ? found : best_stage(leaned, k, 0, false);
  g.second = best_stage(score, k, g.stage, true);
  if (found == 0 && weak_settings(k)) {  // stop 52: every stage's score, as best_stage weighs it
    auto own = stage_scores(r, in, k);
    double n_max = 0;
    for (const auto& [key, tally] : k.stage_symptoms) n_max = std::max(n_max, total(tally));
    for (const auto& [key, tally] : k.stage_symptoms) {
      const int st = stage_of_id(key);
      if (st == 0) continue;
      g.own[st] = own[st];
      g.total[st] = leaned[st] + k.stage_prior_weight * std::log((total(tally) + 1) / (n_max + 1));
    }
  }
  auto learned = [&](int st) {  // the learned words and the frames that lean a stage
    auto out = k.nb_stage_weight > 0 && st > 0
                   ? learned_evidence(g, k, WordLabel::kStage, std::to_string(st))
                   : std::vector<EvidenceLine>{};
    const auto fr = frame_evidence(g.frames, k, st);
    out.insert(out.end(), fr.begin(), fr.end());
    return out;
  };
  g.evidence =
      found > 0 ? r.symptoms.front().evidence : stage_evidence(g.stage, r, in, k, learned(g.stage));
  if (g.second > 0) g.second_evidence = stage_evidence(g.second, r, in, k, learned(g.second));
  for (const auto& [st, s] : g.total) g.stage_ev[st] = stage_evidence(st, r, in, k, learned(st));
  g.answer_ev = stage_evidence(0, r, in, k, {});  // stage 0 has no words: the fallback lines
  std::set<size_t> seen;
  for (const auto& h : in.cues) {
    const Cue& c = k.cues[h.cue];
    if (c.kind != Cue::Kind::kSymptom) continue;
    if (seen.insert(h.cue).second) g.symptom_words[c.symptom] += c.weight;
    g.symptom_evidence[c.symptom].push_back(
        {h.line, h.text, fmt::format("{} word '{}'", c.symptom, c.word)});
  }
  return g;
}

// Evidence lines of a filled candidate: distinct, in line order, at most `n`.
std::vector<EvidenceLine> first_lines(std::vector<EvidenceLine> ev, size_t n) {
  std::stable_sort(ev.begin(), ev.end(),
                   [](const EvidenceLine& a, const EvidenceLine& b) { return a.line < b.line; });
  ev.erase(
      std::unique(ev.begin(), ev.end(),
                  [](const EvidenceLine& a, const EvidenceLine& b) { return a.line == b.line; }),
      ev.end());
  if (ev.size() > n) ev.resize(n);
  return ev;
}

// Candidates of `stage` that `r` lacks: how often each is labelled together with the top symptom,
// plus its share of the stage's tune issues (smoothed by the study's shares); strongest first,
// those under `min_share` left out.
std::vector<Candidate> stage_candidates(const Result& r, int stage,
                                        const std::vector<EvidenceLine>& stage_ev, const Ranker& k,
                                        double min_share, const StageGuess& g) {
  const auto& prior = row(k.stage_symptoms, std::to_string(stage));
  const double n = total(prior);
  auto study = [&](const std::string& id) { return k.share.count(id) ? k.share.at(id) : 0.0; };
  const std::string top = r.symptoms.empty() ? "" : r.symptoms.front().id;
  const auto& co = row(k.co_occurrence, top);
  const double n_top = co.count(top) ? co.at(top) : 0;
  std::set<std::string> ids;
  for (const auto& [id, c] : prior) ids.insert(id);
  for (const auto& [id, s] : k.share) ids.insert(id);  // root-cause ids fail the stage check
  for (const auto& [id, c] : co) ids.insert(id);
  double nb_stage = 0;  // P(the stage's symptoms | words): the learned share is within the stage
  for (const auto& [id, p] : g.nb_symptom) nb_stage += stage_of_id(id) == stage ? p : 0;
  std::vector<Candidate> out;
  for (const auto& id : ids) {
    if (id[0] == 'R' || has(r.symptoms, id) || stage_of_id(id) != stage) continue;
    const double with = co.count(id) && n_top > 0 ? co.at(id) / n_top : 0;
    const double tally = prior.count(id) ? prior.at(id) : 0;
    const double share = (tally + k.study_weight * study(id)) / (n + k.study_weight);
    const auto w = g.symptom_words.find(id);
    const double words = w == g.symptom_words.end() ? 0 : w->second;
    const auto p = g.nb_symptom.find(id);
    const double nb =
        p == g.nb_symptom.end() || nb_stage <= 0 ? 0 : k.nb_fill_weight * p->second / nb_stage;
    const double knn = k.knn_fill_weight * stage_symptom_vote(g.knn, id, stage);
    if (with == 0 && words == 0 && share < min_share && nb < min_share && knn < min_share) continue;
    Candidate c{id, k.co_weight * with + share + k.symptom_word_weight * words + nb + knn, {}, {}};
    const auto learned = nb > std::max({k.co_weight * with, share, k.symptom_word_weight * words})
                             ? learned_evidence(g, k, WordLabel::kSymptom, id)
                             : std::vector<EvidenceLine>{};
    if (knn > std::max({k.co_weight * with, share, k.symptom_word_weight * words, nb})) {
      c.basis = fmt::format("{}; {:g} of {:g} tune stage-{} issues",
                            vote_basis(g.knn, id, knn / k.knn_fill_weight), tally, n, stage);
      c.evidence = first_lines(vote_evidence(g.knn, id, 4), 4);
    } else if (!learned.empty()) {
      std::vector<std::string> ws;
      for (const WordHit* h :
           carrying_words(k.words, WordLabel::kSymptom, id, g.words, k.nb_alpha, 3))
        ws.push_back(h->word);
      c.basis = fmt::format(
          "learned words '{}' (naive Bayes, tune split): P {:.2f} among stage {}'s symptoms; {:g} "
          "of {:g} tune stage-{} issues",
          fmt::join(ws, "', '"), nb / k.nb_fill_weight, stage, tally, n, stage);
      c.evidence = first_lines(learned, 4);
    } else if (words > 0 && k.symptom_word_weight > 0) {
      c.basis = fmt::format("its words; {:g} of {:g} tune stage-{} issues", tally, n, stage);
      c.evidence = first_lines(g.symptom_evidence.at(id), 4);
    } else if (with > 0) {
      c.basis = fmt::format("labelled with {} in {:g} of {:g} tune issues", top, co.at(id), n_top);
      c.evidence = first_lines(r.symptoms.front().evidence, 4);
    } else {
      c.basis = fmt::format("{:g} of {:g} tune stage-{} issues; the study's share {:g}", tally, n,
                            stage, study(id));
      c.evidence = first_lines(stage_ev, 4);
    }
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  return out;
}

// Another stage's symptom that the learned words name, as a candidate: its words and their lines.
// Stop 52: one that no word of the input points at (the stop-49 slot takes the best P whatever
// it is) says so, and shows the failure and context words' lines that let the answer be given.
Candidate cross_candidate(const StageGuess& g, const Ranker& k, const std::string& id, double p,
                          const std::string& why) {
  std::vector<std::string> ws;
  for (const WordHit* h : carrying_words(k.words, WordLabel::kSymptom, id, g.words, k.nb_alpha, 3))
    ws.push_back(h->word);
  if (ws.empty())
    return {id, p, first_lines(g.answer_ev, 4),
            fmt::format("no learned word of the input points at it (naive Bayes, tune split): P "
                        "{:.2f} over all symptoms{}",
                        p, why)};
  return {id, p, first_lines(learned_evidence(g, k, WordLabel::kSymptom, id), 4),
          fmt::format("learned words '{}' (naive Bayes, tune split): P {:.2f} over all symptoms{}",
                      fmt::join(ws, "', '"), p, why)};
}

// Stop 52 (weak_nb_order_min): a weak answer whose learned words name one symptom with P at least
// the setting, its stage resting on little else (weak_nb_thin), puts that symptom first; the
// composed slots follow. A first slot that a table row names (below the threshold) is evidence of
// its own and stays (stop-52 dev split: the rule costs 1 of +6 top-1; a first slot from symptom
// words kept too would cost 3). True when it moved one.
bool nb_first(Result& r, const StageGuess& g, const Ranker& k) {
  if (k.weak_nb_order_min <= 0 ||
      (k.weak_nb_thin >= 0 && g.own.count(g.stage) && g.own.at(g.stage) > k.weak_nb_thin))
    return false;
  if (!r.symptoms.empty() && r.symptoms.front().basis.empty()) return false;
  std::pair<double, std::string> top{-1, ""};
  for (const auto& [id, p] : g.nb_symptom) top = std::max(top, std::pair{p, id});
  if (top.first < k.weak_nb_order_min) return false;
  const auto at = std::find_if(r.symptoms.begin(), r.symptoms.end(),
                               [&](const Candidate& c) { return c.id == top.second; });
  const std::string why = fmt::format(
      "; first: its words are sure, P {:.2f} (cues.yaml "
      "weak_nb_order_min {:g})",
      top.first, k.weak_nb_order_min);
  Candidate c =
      at != r.symptoms.end() ? std::move(*at) : cross_candidate(g, k, top.second, top.first, "");
  if (at != r.symptoms.end()) r.symptoms.erase(at);
  c.basis += why;
  const auto ev = g.stage_ev.find(stage_of_id(top.second));
  if (c.evidence.empty() && ev != g.stage_ev.end()) c.evidence = first_lines(ev->second, 4);
  r.symptoms.insert(r.symptoms.begin(), std::move(c));
  if (r.symptoms.size() > static_cast<size_t>(std::max(k.fill_to, 1)))
    r.symptoms.resize(static_cast<size_t>(std::max(k.fill_to, 1)));
  return true;
}

// Stop 52 (weak_margin): a runner-up stage within weak_margin of the inferred one puts its best
// symptom at slot weak_margin_slot (2 at the least: the first stays the inferred stage's), in place
// of the last candidate of the answer's stage after it (else of the last). Needs fill_to >= 2.
void hedge_runner_up(Result& r, const StageGuess& g, const Ranker& k) {
  if (k.fill_to < 2) return;
  const auto n = static_cast<size_t>(k.fill_to);
  int runner = 0;
  double best = -1e300;
  for (const auto& [st, s] : g.total) {
    if (st != g.stage && s > best) std::tie(runner, best) = std::pair{st, s};
  }
  if (k.weak_margin < 0 || runner == 0 || g.total.at(g.stage) - best > k.weak_margin) return;
  if (std::any_of(r.symptoms.begin(), r.symptoms.begin() + std::min(n, r.symptoms.size()),
                  [&](const Candidate& c) { return stage_of_id(c.id) == runner; }))
    return;
  auto cs = stage_candidates(r, runner, g.stage_ev.at(runner), k, 0, g);
  if (cs.empty()) return;
  Candidate c = std::move(cs.front());
  c.basis += fmt::format("; stage {} scores within {:.2f} of stage {} (cues.yaml weak_margin)",
                         runner, g.total.at(g.stage) - best, g.stage);
  const size_t slot =
      std::clamp<size_t>(static_cast<size_t>(std::max(k.weak_margin_slot, 1)) - 1, 1, n - 1);
  r.symptoms.insert(r.symptoms.begin() + static_cast<long>(std::min(slot, r.symptoms.size())),
                    std::move(c));
  if (r.symptoms.size() <= n) return;
  for (size_t i = n + 1; i-- > slot + 1;) {
    if (stage_of_id(r.symptoms[i].id) != r.stage) continue;
    r.symptoms.erase(r.symptoms.begin() + static_cast<long>(i));
    return;
  }
  r.symptoms.erase(r.symptoms.begin() + static_cast<long>(n));
}

// Stop 49: the tables named at most nb_cross_tables_max of the three and all three are of one
// stage: the last is the stage's least likely, and another stage's best guess replaces it.
void cross_last_slot(Result& r, const StageGuess& g, const Ranker& k, size_t from_tables) {
  const auto n = static_cast<size_t>(std::max(k.fill_to, 0));
  if (k.nb_cross_tables_max < 0 || n < 2 || r.symptoms.size() < n ||
      from_tables > static_cast<size_t>(k.nb_cross_tables_max) || from_tables >= n ||
      std::any_of(r.symptoms.begin(), r.symptoms.begin() + static_cast<long>(n),
                  [&](const Candidate& c) { return stage_of_id(c.id) != r.stage; }))
    return;
  std::string id;
  double p_best = -1;
  for (const auto& [sid, p] : g.nb_symptom) {
    if (p > p_best && stage_of_id(sid) != r.stage && !has(r.symptoms, sid)) {
      id = sid;
      p_best = p;
    }
  }
  if (!id.empty())
    r.symptoms[n - 1] = cross_candidate(g, k, id, p_best,
                                        fmt::format("; the tables named {} of {}", from_tables, n));
}

// Fills r.symptoms to k.fill_to: the answer's stage's common symptoms first, then the runner-up
// stage's (a stage with two common symptoms has no useful third), then the stage's rare ones. An
// `inferred` answer may be composed across stages (stop 52's weak_* settings): true when its
// first slot may then be of another stage.
bool fill_symptoms(Result& r, const StageGuess& g, const Ranker& k, bool inferred) {
  const size_t from_tables = r.symptoms.size();
  // Another stage's symptom the learned words name with P >= nb_cross_min takes the last slot.
  std::string cross;
  double best = k.nb_cross_min > 0 ? k.nb_cross_min : 2;
  for (const auto& [id, p] : g.nb_symptom) {
    if (p >= best && stage_of_id(id) != r.stage && !has(r.symptoms, id)) {
      cross = id;
      best = p;
    }
  }
  int room = k.fill_to - (cross.empty() ? 0 : 1);
  auto add = [&](std::vector<Candidate> cs) {
    for (auto& c : cs) {
      if (static_cast<int>(r.symptoms.size()) >= room) return;
      r.symptoms.push_back(std::move(c));
    }
  };
  add(stage_candidates(r, g.stage, g.evidence, k, k.min_share, g));
  if (!cross.empty() && static_cast<int>(r.symptoms.size()) < k.fill_to)
    r.symptoms.push_back(cross_candidate(g, k, cross, best, ""));
  room = k.fill_to;
  if (g.second > 0) add(stage_candidates(r, g.second, g.second_evidence, k, k.min_share, g));
  add(stage_candidates(r, g.stage, g.evidence, k, 0, g));  // no runner-up: the stage's rare ones
  if (cross.empty()) cross_last_slot(r, g, k, from_tables);
  if (inferred) hedge_runner_up(r, g, k);
  return inferred &&
         (nb_first(r, g, k) || vote_first(r, g.knn, k.knn_first_min, k.knn_first_sim, k.fill_to));
}

// The learned words' root causes of `stage`: P(root cause | words) renormalised within it.
std::map<std::string, double> stage_root_cause_words(const StageGuess& g, int stage) {
  std::map<std::string, double> out;
  double z = 0;
  for (const auto& [id, p] : g.nb_root_cause) z += stage_of_id(id) == stage ? p : 0;
  for (const auto& [id, p] : g.nb_root_cause)
    if (stage_of_id(id) == stage && z > 0) out[id] = p / z;
  return out;
}

// Root causes of the answer's stage: the tables' (weighted) plus how often each goes with the top
// symptom on the tune split (else with the stage), plus nb_root_cause_weight times what the
// learned words say (stop 49); other stages' go last. The tally and the words add root causes
// only when the tables name none of the stage (a draft's base follows the first three).
void rank_root_causes(Result& r, const StageGuess& g, const Ranker& k) {
  const std::string& top = r.symptoms.front().id;
  const auto& by_sym = row(k.symptom_root_causes, top);
  const auto& by_stage = row(k.stage_root_causes, std::to_string(r.stage));
  const auto by_words = stage_root_cause_words(g, r.stage);
  const double n_sym = total(by_sym), n_stage = total(by_stage);
  double table_max = 0;
  for (const auto& c : r.root_causes) table_max = std::max(table_max, c.score);
  std::map<std::string, Candidate> all;
  for (const auto& c : r.root_causes) all[c.id] = c;
  const bool tables_name_one =
      std::any_of(r.root_causes.begin(), r.root_causes.end(),
                  [&](const Candidate& c) { return stage_of_id(c.id) == r.stage; });
  if (!tables_name_one) {
    for (const auto* tally : {&by_stage, &by_sym, &by_words})
      for (const auto& [id, n] : *tally) all.try_emplace(id, Candidate{id, 0, {}, {}});
  }
  std::vector<std::pair<double, Candidate>> ranked;
  for (auto& [id, c] : all) {
    const double table = table_max > 0 ? c.score / table_max : 0;
    const double sym = by_sym.count(id) ? by_sym.at(id) / n_sym : 0;
    const double st = by_stage.count(id) ? by_stage.at(id) / n_stage : 0;
    const double p = by_words.count(id) ? by_words.at(id) : 0;
    const double learned = k.nb_root_cause_weight * p;
    double key = k.root_cause_table_weight * table + sym + 0.1 * st + learned;
    if (stage_of_id(id) != r.stage) key -= 1000;
    const double n_id = by_sym.count(id) ? by_sym.at(id) : 0;
    if (c.evidence.empty() && learned > std::max(sym, 0.1 * st)) {
      std::vector<std::string> ws;
      for (const WordHit* h :
           carrying_words(k.words, WordLabel::kRootCause, id, g.words, k.nb_alpha, 3))
        ws.push_back(h->word);
      c.score = p;
      c.basis = fmt::format(
          "learned words '{}' (naive Bayes, tune split): P {:.2f} among stage {}'s root causes; "
          "with {} in {:g} of {:g} tune issues",
          fmt::join(ws, "', '"), p, r.stage, top, n_id, n_sym);
      c.evidence = first_lines(learned_evidence(g, k, WordLabel::kRootCause, id), 4);
    }
    if (c.evidence.empty()) {
      c.score = n_sym > 0 ? sym : st;
      c.basis = n_sym > 0 ? fmt::format("with {} in {:g} of {:g} tune issues", top, n_id, n_sym)
                          : fmt::format("{:g} of {:g} tune stage-{} issues",
                                        by_stage.count(id) ? by_stage.at(id) : 0, n_stage, r.stage);
      c.evidence = first_lines(r.symptoms.front().evidence, 4);
    }
    ranked.emplace_back(key, std::move(c));
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  r.root_causes.clear();
  for (auto& [key, c] : ranked) {
    if (r.root_causes.size() >= 3) break;
    r.root_causes.push_back(std::move(c));
  }
}

// Stop 55: a declined answer's ranked guesses, as the inferred answer would have filled them.
std::vector<Candidate> guesses_if_failure(const Result& r, const StageGuess& g, const Ranker& k) {
  Result c = r;
  std::erase_if(c.symptoms, [&](const Candidate& x) { return stage_of_id(x.id) != g.stage; });
  c.stage = g.stage;
  fill_symptoms(c, g, k, true);
  if (c.symptoms.size() > 2) c.symptoms.resize(2);
  return c.symptoms;
}

// Stop 59: a table answer whose top symptom's score came only from rows marked `reinfer` (their
// stage a default) and is under reinfer_below.
bool may_overrule(const Result& r, const Ranker& k) {
  if (r.kind != Result::Kind::kFound || k.reinfer_below <= 0 || r.symptoms.empty()) return false;
  const Candidate& top = r.symptoms.front();
  return top.score < k.reinfer_below && top.reinfer_score >= top.score - 1e-9;
}

// Its stage inferred as a weak answer's (the rows' scores count towards their stage): when
// another stage wins, only that stage's table candidates stay and the answer is an inferred one.
// Returns the overruled stage, 0 when the tables' stage stands.
int overrule_stage(Result& r, StageGuess& g, const RankInput& in, const Ranker& k) {
  g = guess_stage(r, in, k, 0);
  if (g.stage == 0 || g.stage == r.stage) {
    g = guess_stage(r, in, k, r.stage);  // as a table answer's: its stage and evidence
    return 0;
  }
  const Candidate& top = r.symptoms.front();
  const int was = r.stage;
  r.overruled = fmt::format("{} at {:.2f} (stage {})", top.id, top.score, was);
  auto other_stage = [&](const Candidate& c) { return stage_of_id(c.id) != g.stage; };
  std::erase_if(r.symptoms, other_stage);
  std::erase_if(r.root_causes, other_stage);
  r.basis = Result::Basis::kInferred;
  r.stage = g.stage;
  return was;
}

}  // namespace

void apply_ranker(Result& r, const RankInput& raw, const Tables& t) {
  const Ranker& k = t.ranker;
  if (!k.enabled || r.kind == Result::Kind::kEmpty || r.kind == Result::Kind::kBinary) return;
  RankInput in = raw;  // a whole-word cue found only as the start of a longer word does not count
  std::erase_if(in.cues, [&](const CueHit& h) {
    return k.cues[h.cue].whole && !has_whole_word(h.text, k.cues[h.cue].word);
  });
  find_neighbours(r, in, k);  // stop 53: the similar labelled tune issues, and their votes
  StageGuess g;
  Gate gate = Gate::kOpen;
  int overruled = 0;  // stop 59: the stage of the table answer the words overruled
  if (may_overrule(r, k)) {
    overruled = overrule_stage(r, g, in, k);
  } else if (r.kind == Result::Kind::kFound) {
    g = guess_stage(r, in, k, r.stage);
  } else {
    gate = open_gate(in, k);
    g = guess_stage(r, in, k, 0);
    if (g.stage == 0) return;
    if (gate == Gate::kClosed || (gate != Gate::kOpen && !enough_words(g.stage, g.words, k))) {
      r.guesses = guesses_if_failure(r, g, k);
      return;
    }
    // The tables' weak matches of that stage stay first; other stages' go.
    std::erase_if(r.symptoms, [&](const Candidate& c) { return stage_of_id(c.id) != g.stage; });
    r.kind = Result::Kind::kFound;
    r.basis = Result::Basis::kInferred;
    r.stage = g.stage;
    r.why.clear();
  }
  const bool across = fill_symptoms(r, g, k, r.basis == Result::Basis::kInferred);
  if (r.symptoms.empty()) return;
  if (across) r.stage = stage_of_id(r.symptoms.front().id);  // stop 52: the first slot's stage
  if (overruled > 0 && r.stage == overruled) r.overruled.clear();  // the first slot went back
  rank_root_causes(r, g, k);
  if (gate == Gate::kOpen) return;
  // A relaxed answer says which opening it came through, on its first candidate.
  std::string& basis = r.symptoms.front().basis;
  basis += fmt::format(
      "{}the answer gate: {} (cues.yaml {})", basis.empty() ? "" : "; ",
      gate == Gate::kNoContext ? "a failure word without distributed context"
                               : "distributed context without a failure word",
      gate == Gate::kNoContext ? "answer_without_context" : "answer_without_failure_word");
}

}  // namespace fl::triage
