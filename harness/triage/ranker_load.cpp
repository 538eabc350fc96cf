// Loading the ranker's folder: cues.yaml (settings, stage words, symptom words), priors.yaml
// and words.yaml, each checked against the taxonomy.
#include "harness/triage/ranker.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "harness/triage/triage.hpp"
#include "harness/triage/yaml_file.hpp"

namespace fl::triage {

namespace {

template <typename T>
T value(const std::string& file, const YAML::Node& n, const std::string& what) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail_at(file, n, fmt::format("{}: not a valid value", what));
  }
}

int stage_of_key(const std::string& file, const YAML::Node& key, const Taxonomy& t) {
  const auto s = key.as<std::string>();
  const bool digit = s.size() == 1 && s[0] >= '0' && s[0] <= '9';
  if (!digit || !t.stage_name.count(s[0] - '0')) {
    fail_at(file, key, fmt::format("stage '{}' is not in the taxonomy", s));
  }
  return s[0] - '0';
}

void add_words(const std::string& file, const YAML::Node& list, Cue::Kind kind, int stage,
               Ranker& r) {
  if (!list.IsSequence()) fail_at(file, list, "words: must be a list");
  for (const auto& w : list) {
    Cue c;
    c.kind = kind;
    c.stage = stage;
    c.word = value<std::string>(file, w, "word");
    c.anywhere = !c.word.empty() && c.word[0] == '*';
    if (c.anywhere) c.word.erase(0, 1);
    if (c.word.size() < 2) fail_at(file, w, "word: at least 2 characters");
    c.word = ascii_lower(c.word);
    r.cues.push_back(std::move(c));
  }
}

// cues.yaml's `settings:`: every key known (the error lists them), each read into its field.
// Each key `set` reads is an allowed key: the one list is the calls below.
void load_settings(const std::string& file, const YAML::Node& s, Ranker& r) {
  if (!s.IsMap()) fail_at(file, s, "settings must be a mapping");
  std::set<std::string> allowed;
  auto set = [&](const char* key, auto& v) {
    allowed.insert(key);
    if (s[key]) v = value<std::remove_reference_t<decltype(v)>>(file, s[key], key);
  };
  set("fill_to", r.fill_to);
  set("table_stage_weight", r.table_stage_weight);
  set("co_weight", r.co_weight);
  set("study_weight", r.study_weight);
  set("min_share", r.min_share);
  set("learned_stage_weight", r.learned_stage_weight);
  set("error_text_is_failure", r.error_text_is_failure);
  set("answer_context_only", r.answer_context_only);
  set("answer_without_context", r.answer_without_context);
  set("answer_without_failure_word", r.answer_without_failure_word);
  set("answer_min_words", r.answer_min_words);
  set("symptom_word_weight", r.symptom_word_weight);
  set("stage_prior_weight", r.stage_prior_weight);
  set("nb_alpha", r.nb_alpha);
  set("nb_stage_weight", r.nb_stage_weight);
  set("nb_fill_weight", r.nb_fill_weight);
  set("nb_cross_min", r.nb_cross_min);
  set("nb_max_bytes", r.nb_max_bytes);
  set("nb_cross_tables_max", r.nb_cross_tables_max);
  set("nb_root_cause_weight", r.nb_root_cause_weight);
  set("nb_mix_power", r.nb_mix_power);
  if (r.nb_mix_power <= 0) fail_at(file, s["nb_mix_power"], "nb_mix_power: must be above 0");
  set("root_cause_table_weight", r.root_cause_table_weight);
  set("weak_margin", r.weak_margin);
  set("weak_margin_slot", r.weak_margin_slot);
  set("weak_nb_order_min", r.weak_nb_order_min);
  set("weak_nb_thin", r.weak_nb_thin);
  set("reinfer_below", r.reinfer_below);              // stop 59
  set("frames_stage_weight", r.frames_stage_weight);  // stop 53
  set("frames_alpha", r.frames_alpha);
  set("frames_prior", r.frames_prior);
  set("frames_max_bytes", r.frames_max_bytes);
  set("knn_show", r.knn_show);
  set("knn_k", r.knn_k);
  set("knn_stage_weight", r.knn_stage_weight);
  set("knn_fill_weight", r.knn_fill_weight);
  set("knn_first_min", r.knn_first_min);
  set("knn_bm25", r.knn_bm25);
  set("knn_first_sim", r.knn_first_sim);
  set("knn_stage_centred", r.knn_stage_centred);
  check_keys(file, s, allowed, "settings");
}

// cues.yaml's word lists: failure, context, healthy and notice words, stage and symptom words.
void load_word_lists(const std::string& file, const YAML::Node& doc, const Taxonomy& t, Ranker& r) {
  add_words(file, doc["failure"], Cue::Kind::kFailure, 0, r);
  add_words(file, doc["context"], Cue::Kind::kContext, 0, r);
  if (doc["healthy"]) add_words(file, doc["healthy"], Cue::Kind::kHealthy, 0, r);
  if (const auto n = doc["notice"]) {
    if (!n.IsSequence()) fail_at(file, n, "notice: must be a list");
    for (const auto& w : n) {
      r.notice.push_back(ascii_lower(value<std::string>(file, w, "notice")));
      if (r.notice.back().size() < 2) fail_at(file, w, "notice: at least 2 characters");
    }
  }
  const YAML::Node stages = doc["stages"];
  if (!stages.IsMap()) fail_at(file, stages, "stages: must map a stage to its words");
  for (const auto& kv : stages) {
    add_words(file, kv.second, Cue::Kind::kStage, stage_of_key(file, kv.first, t), r);
  }
  const YAML::Node sw = doc["symptom_words"];
  if (!sw) return;
  if (!sw.IsMap()) fail_at(file, sw, "symptom_words: must map a symptom to its words");
  for (const auto& kv : sw) {
    const auto id = kv.first.as<std::string>();
    if (!t.symptom_name.count(id))
      fail_at(file, kv.first,
              fmt::format("symptom_words: '{}' is not a symptom of the taxonomy", id));
    const size_t first = r.cues.size();
    add_words(file, kv.second, Cue::Kind::kSymptom, id[0] - '0', r);
    for (size_t i = first; i < r.cues.size(); ++i) r.cues[i].symptom = id;
  }
}

void load_cues(const std::string& file, const Taxonomy& t, Ranker& r) {
  const YAML::Node doc = load_yaml(file, "ranker file");
  check_keys(file, doc,
             {"settings", "failure", "context", "healthy", "notice", "stages", "symptom_words"},
             "file");
  if (const auto s = doc["settings"]) load_settings(file, s, r);
  load_word_lists(file, doc, t, r);
}

// One table of priors.yaml: outer keys checked by `outer`, inner keys must be in `inner`.
Counts counts(const std::string& file, const YAML::Node& n, const std::string& what,
              const std::function<void(const YAML::Node&)>& outer,
              const std::map<std::string, std::string>& inner) {
  Counts out;
  if (!n) return out;
  if (!n.IsMap()) fail_at(file, n, fmt::format("{}: must be a mapping", what));
  for (const auto& kv : n) {
    outer(kv.first);
    if (!kv.second.IsMap())
      fail_at(file, kv.second, fmt::format("{}: must map ids to counts", what));
    auto& row = out[kv.first.as<std::string>()];
    for (const auto& c : kv.second) {
      const auto id = c.first.as<std::string>();
      if (!inner.count(id)) {
        fail_at(file, c.first, fmt::format("{}: '{}' is not in the taxonomy", what, id));
      }
      row[id] = value<double>(file, c.second, what + ": " + id);
    }
  }
  return out;
}

// priors.yaml's stage_words: word -> stage -> learned weight, scaled by learned_stage_weight.
void load_stage_words(const std::string& file, const YAML::Node& n, const Taxonomy& t, Ranker& r) {
  if (!n || r.learned_stage_weight == 0) return;
  if (!n.IsMap()) fail_at(file, n, "stage_words: must map words to stages and weights");
  for (const auto& kv : n) {
    if (!kv.second.IsMap()) fail_at(file, kv.second, "stage_words: must map stages to weights");
    for (const auto& sw : kv.second) {
      Cue c;
      c.word = value<std::string>(file, kv.first, "stage_words");
      if (c.word.size() < 2) fail_at(file, kv.first, "stage_words: at least 2 characters");
      c.stage = stage_of_key(file, sw.first, t);
      c.weight = r.learned_stage_weight * value<double>(file, sw.second, "stage_words: weight");
      c.whole = true;
      r.cues.push_back(std::move(c));
    }
  }
}

void load_priors(const std::string& file, const Taxonomy& t, Ranker& r) {
  const YAML::Node doc = load_yaml(file, "ranker file");
  check_keys(file, doc,
             {"issues", "stage_symptoms", "co_occurrence", "symptom_root_causes",
              "stage_root_causes", "stage_words"},
             "file");
  if (doc["issues"]) r.issues = value<int>(file, doc["issues"], "issues");
  auto stage = [&](const YAML::Node& k) { stage_of_key(file, k, t); };
  auto symptom = [&](const YAML::Node& k) {
    if (!t.symptom_name.count(k.as<std::string>()))
      fail_at(file, k, fmt::format("'{}' is not a symptom of the taxonomy", k.as<std::string>()));
  };
  r.stage_symptoms = counts(file, doc["stage_symptoms"], "stage_symptoms", stage, t.symptom_name);
  r.co_occurrence = counts(file, doc["co_occurrence"], "co_occurrence", symptom, t.symptom_name);
  r.symptom_root_causes =
      counts(file, doc["symptom_root_causes"], "symptom_root_causes", symptom, t.root_cause_name);
  r.stage_root_causes =
      counts(file, doc["stage_root_causes"], "stage_root_causes", stage, t.root_cause_name);
  load_stage_words(file, doc["stage_words"], t, r);
}

}  // namespace

Ranker load_ranker(const std::string& dir, const Taxonomy& t) {
  Ranker r;
  if (dir.empty() || dir == "none") return r;
  load_cues(dir + "/cues.yaml", t, r);
  load_priors(dir + "/priors.yaml", t, r);
  load_word_model(dir + "/words.yaml", t, r.words);
  load_frame_model(dir + "/frames.yaml", t, r.frames);  // stop 53

  load_neighbours(dir + "/neighbours.jsonl", t, r.neighbours);  // stop 53
  r.share = t.share;
  r.enabled = true;
  return r;
}

}  // namespace fl::triage
