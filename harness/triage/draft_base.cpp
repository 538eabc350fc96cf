#include "harness/triage/draft_base.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <string_view>

#include <fmt/format.h>

#include "harness/triage/dialect.hpp"

namespace fl::triage {

namespace fs = std::filesystem;

namespace {

std::string yaml_scalar(const YAML::Node& n, const char* key) {
  return n && n.IsMap() && n[key] && n[key].IsScalar() ? n[key].Scalar() : "";
}

int base_topo_int(const YAML::Node& doc, const char* key, int dflt) {
  const YAML::Node t = doc["topology"];
  try {
    return t && t.IsMap() && t[key] ? t[key].as<int>() : dflt;
  } catch (const YAML::Exception&) {
    return dflt;
  }
}

// Whether the expectation's pattern (its own or, for any/all, one it combines) matches one of the
// candidate's evidence lines. The evidence lines are an issue's error lines, a few hundred bytes
// each: a scan of the whole input (up to 50 MiB) would not be.
bool pattern_matches(const YAML::Node& expect, const Candidate& c) {
  if (!expect || !expect.IsMap() || yaml_scalar(expect, "absent") == "true") return false;
  const YAML::Node of = expect["of"];
  if (of && of.IsSequence()) {
    return std::any_of(of.begin(), of.end(),
                       [&](const YAML::Node& e) { return pattern_matches(e, c); });
  }
  const std::string pattern = yaml_scalar(expect, "pattern");
  if (pattern.empty()) return false;
  try {
    const std::regex re(pattern);
    return std::any_of(c.evidence.begin(), c.evidence.end(), [&](const EvidenceLine& e) {
      return e.text.size() <= 4096 && std::regex_search(e.text, re);
    });
  } catch (const std::regex_error&) {
    return false;  // a pattern std::regex does not take
  }
}

}  // namespace

std::vector<std::string> evidence_events(const Candidate& c) {
  std::vector<std::string> out;
  for (const auto& e : c.evidence) {
    const dialect::LogsSignature* s = dialect::classify(e.text);
    if (s != nullptr && std::find(out.begin(), out.end(), s->name) == out.end())
      out.emplace_back(s->name);
  }
  return out;
}

const std::vector<std::string>& oracles_showing(const std::string& event) {
  // fl-detect-logs event -> the oracles (harness/oracles) that observe that event itself. The
  // other events (a build, an import, the store, the rendezvous, a layout check) are raised as
  // errors whose text an error_signature pattern names; expect_shows reads the pattern for them.
  static const std::vector<std::string> kCheckpoint = {"checkpoint_error"};
  static const std::map<std::string, std::vector<std::string>> kTable = {
      {"oom", {"oom"}},
      {"comm timeout", {"comm_timeout", "hang"}},
      {"loss scale", {"loss_nonfinite", "skipped_steps"}},
      {"killed", {"exit_class"}},
      {"tp diverge", {"output_mismatch"}},
      {"disk full", kCheckpoint},
      {"missing shard", kCheckpoint},
      {"corrupt shard", kCheckpoint},
      {"size mismatch", kCheckpoint},
      {"format version", kCheckpoint},
      {"other layout", kCheckpoint},
      {"lost latest", kCheckpoint},
  };
  static const std::vector<std::string> kNone;
  const auto it = kTable.find(event);
  return it == kTable.end() ? kNone : it->second;
}

std::string pattern_text(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[++i];
      if (n == 's' || n == 'n' || n == 't') {
        out += ' ';  // a blank or a line break between words
      } else if (!std::isalnum(static_cast<unsigned char>(n))) {
        out += n;  // `\.` is `.`; a class such as `\d` gives nothing
      }
      continue;
    }
    if (c == '(') {
      // A group of plain alternatives, `(e|ing)` or `(?:e|ing)`: its first.
      const size_t close = pattern.find(')', i);
      const size_t open = pattern.find('(', i + 1);
      if (close != std::string::npos && (open == std::string::npos || open > close)) {
        std::string group = pattern.substr(i + 1, close - i - 1);
        if (group.rfind("?:", 0) == 0) group.erase(0, 2);
        out += pattern_text(group.substr(0, group.find('|')));
        i = close;
        continue;
      }
    }
    if (std::string_view("^$?*+").find(c) != std::string_view::npos) continue;
    out += c;
  }
  return out;
}

bool expect_shows(const YAML::Node& expect, const std::string& event) {
  if (!expect || !expect.IsMap() || yaml_scalar(expect, "absent") == "true") return false;
  const std::string oracle = yaml_scalar(expect, "oracle");
  if (oracle == "any" || oracle == "all") {
    const YAML::Node of = expect["of"];
    if (!of || !of.IsSequence()) return false;
    return std::any_of(of.begin(), of.end(),
                       [&](const YAML::Node& e) { return expect_shows(e, event); });
  }
  const auto& kinds = oracles_showing(event);
  if (std::find(kinds.begin(), kinds.end(), oracle) != kinds.end()) return true;
  // A pattern is regex text, but its words are the error's: fl-detect-logs' table reads them.
  // The pattern as it is, and as a text it matches (`creat(e|ing) shared memory segment` is
  // `create shared memory segment`, which fl-detect-logs reads as "shm setup").
  const std::string pattern = yaml_scalar(expect, "pattern");
  if (pattern.empty()) return false;
  for (const auto& text : {pattern, pattern_text(pattern)}) {
    const dialect::LogsSignature* s = dialect::classify(text);
    if (s != nullptr) return event == s->name;
  }
  return false;
}

std::vector<std::string> default_scenario_dirs() {
  const std::string root = fs::path(default_taxonomy_path()).parent_path().string();
  return {root + "/symptoms", root + "/issues"};
}

std::vector<ScenarioSource> load_scenario_sources(const std::vector<std::string>& dirs) {
  std::vector<std::string> files;
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  const std::string tree = fs::path(default_taxonomy_path()).parent_path().parent_path().string();
  std::vector<ScenarioSource> out;
  for (const auto& f : files) {
    ScenarioSource s;
    try {
      s.doc = YAML::LoadFile(f);
    } catch (const YAML::Exception&) {
      continue;
    }
    const YAML::Node ref = s.doc["reference"];
    s.symptom = yaml_scalar(ref, "symptom");
    if (s.symptom.empty() || !s.doc["fix"] || s.doc["extends"]) continue;
    s.path = f;
    s.shown = f.rfind(tree + "/", 0) == 0 ? f.substr(tree.size() + 1) : f;
    s.name = yaml_scalar(s.doc, "name");
    s.root_cause = yaml_scalar(ref, "root_cause");
    s.fix_pattern = yaml_scalar(ref, "fix_pattern");
    s.mechanism = yaml_scalar(ref, "mechanism");
    if (ref && ref["needs"] && ref["needs"].IsSequence()) {
      for (const auto& k : ref["needs"]) {
        if (k.IsScalar()) s.needs.push_back(k.Scalar());
      }
    }
    s.description = yaml_scalar(s.doc, "description");
    if (!yaml_scalar(ref, "issue").empty()) s.cited = "issue " + yaml_scalar(ref, "issue");
    if (!yaml_scalar(ref, "pr").empty()) s.cited = "pr " + yaml_scalar(ref, "pr");
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// Whether a base whose workload.versions names a framework ("deepspeed", "megatron") belongs to
// another framework than the input's: the input names some framework, and not the base's.
bool other_framework(const YAML::Node& workload, const std::vector<std::string>& named) {
  if (named.empty() || !workload || !workload.IsMap()) return false;
  const YAML::Node v = workload["versions"];
  if (!v || !v.IsMap()) return false;
  bool states = false;
  for (const char* fw : {"deepspeed", "megatron"}) {
    if (!v[fw]) continue;
    states = true;
    if (std::find(named.begin(), named.end(), fw) != named.end()) return false;  // its own
  }
  return states;
}
}  // namespace

const ScenarioSource* choose_base(const Result& r, const std::vector<ScenarioSource>& sources,
                                  const BaseQuery& q, const BaseWeights& w) {
  const Candidate& top = r.symptoms.front();
  const std::vector<std::string> events = evidence_events(top);
  const ScenarioSource* best = nullptr;
  double best_score = -1;
  for (const auto& s : sources) {
    if (s.symptom != top.id) continue;
    double score = 0;
    const YAML::Node wl = s.doc["workload"];
    if (!q.moe_input && wl && wl.IsMap() && wl["moe"]) score -= w.root_cause / 2;
    if (other_framework(wl, q.frameworks)) score -= w.other_framework;
    for (size_t i = 0; i < r.root_causes.size() && i < 3; ++i) {
      if (r.root_causes[i].id == s.root_cause) score += w.root_cause / static_cast<double>(i + 1);
    }
    const YAML::Node expect = s.doc["expect"];
    if (std::any_of(events.begin(), events.end(),
                    [&](const std::string& e) { return expect_shows(expect, e); }))
      score += w.event;
    // Between bases of the top root cause only: an error text is no reason for another cause.
    if (!r.root_causes.empty() && s.root_cause == r.root_causes.front().id &&
        pattern_matches(expect, top))
      score += w.pattern;
    if (q.zero_stage && base_topo_int(s.doc, "zero", 0) == *q.zero_stage) score += w.zero;
    if (q.launcher && *q.launcher == yaml_scalar(s.doc["topology"], "launcher"))
      score += w.launcher;
    if (s.shown.find("symptoms/") != std::string::npos) score += w.symptoms_dir;
    if (score > best_score) best = &s, best_score = score;
  }
  return best;
}

// The first sentence (of 60 characters at least) of a description: what a stands-for reference
// says the draft builds.
std::string first_sentence(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  const auto end = s.find(". ", std::min<size_t>(60, s.size()));
  if (end != std::string::npos) s.resize(end + 1);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// A URL of a GitHub thread in the input: the draft then cites it.
Thread find_thread(const std::string& text) {
  static const std::regex kUrl(R"(https://github\.com/([\w.-]+)/([\w.-]+)/(issues|pull)/(\d+))");
  size_t line = 1, start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string l = text.substr(start, end - start);
    std::smatch m;
    if (l.find("github.com/") != std::string::npos && std::regex_search(l, m, kUrl)) {
      return {m[3] == "pull" ? "pr" : "issue",
              fmt::format("{}/{}#{}", m[1].str(), m[2].str(), m[4].str()), m[0].str(), line, l};
    }
    if (end == text.size()) break;
    start = end + 1;
    ++line;
  }
  return {};
}

}  // namespace fl::triage
