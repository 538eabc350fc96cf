#include "harness/triage/eval.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fl::triage {

namespace {

struct Label {
  std::string id;
  std::vector<std::string> symptoms;
  std::string root_cause;  // id, or "none"
  int stage = 0;
};

Label label_of(const nlohmann::json& j, const Taxonomy& tax) {
  Label l;
  l.id = j.at("id").get<std::string>();
  l.symptoms = j.at("symptoms").get<std::vector<std::string>>();
  l.stage = j.at("stage").get<int>();
  const auto name = j.at("root_cause").get<std::string>();
  const auto it = tax.root_cause_by_name.find(name);
  l.root_cause = it == tax.root_cause_by_name.end() ? "none" : it->second;
  return l;
}

// Only the input fields: the labels never reach triage.
std::string input_of(const nlohmann::json& j) {
  std::string text;
  for (const char* key : {"error_lines", "env_lines"}) {
    for (const auto& line : j.at(key)) text += line.get<std::string>() + "\n";
  }
  return text;
}

std::string pct(int n, int d) {
  return d == 0 ? "-" : fmt::format("{:.1f}% ({}/{})", 100.0 * n / d, n, d);
}

void score(const Label& l, const Result& r, EvalCounts& c, std::string* lines, bool verbose) {
  const bool none_label = l.symptoms.size() == 1 && l.symptoms[0] == "none";
  const bool answered = r.kind == Result::Kind::kFound;
  std::string top = answered ? r.symptoms.front().id : "none";
  if (none_label) {
    ++c.nones;
    c.nones_right += !answered;
  } else {
    ++c.failures;
    c.failures_answered += answered;
  }
  auto labelled = [&](const std::string& id) {
    return std::find(l.symptoms.begin(), l.symptoms.end(), id) != l.symptoms.end();
  };
  bool t1 = none_label ? !answered : answered && labelled(top);
  bool t3 = t1;
  for (size_t i = 0; answered && !none_label && i < r.symptoms.size() && i < 3; ++i) {
    t3 = t3 || labelled(r.symptoms[i].id);
  }
  const int stage = answered ? r.stage : 0;
  const std::string rc = answered && !r.root_causes.empty() ? r.root_causes.front().id : "none";
  c.top1 += t1;
  c.top3 += t3;
  c.stage += stage == l.stage;
  c.root_cause += rc == l.root_cause;
  if (verbose) {
    *lines += fmt::format("  {:<32} label {:<10} stage {} {:<5} | got {:<5} stage {} {:<5} {}\n",
                          l.id, fmt::format("{}", fmt::join(l.symptoms, "+")), l.stage,
                          l.root_cause, top, stage, rc,
                          t1   ? "ok"
                          : t3 ? "top3"
                               : "MISS");
  }
}

}  // namespace

EvalCounts evaluate(const Tables& t, const EvalOptions& o, std::string* table) {
  std::ifstream in(o.corpus);
  if (!in) throw SignatureError(fmt::format("{}: cannot open the corpus", o.corpus));
  EvalCounts c;
  std::string line, per_issue;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j;
    Label l;
    try {
      j = nlohmann::json::parse(line);
      if (o.split != "all" && j.at("split").get<std::string>() != o.split) continue;
      l = label_of(j, t.taxonomy);
    } catch (const nlohmann::json::exception& e) {
      throw SignatureError(fmt::format("{}:{}: {}", o.corpus, n, e.what()));
    }
    Input input;
    input.text = input_of(j);
    input.original_bytes = input.text.size();
    if (input.text.empty()) {
      ++c.skipped;
      continue;
    }
    ++c.issues;
    score(l, triage(input, t), c, &per_issue, o.verbose);
  }
  std::string& out = *table;
  out += per_issue;
  out += fmt::format("split {}: {} issues with input lines ({} without any, skipped)\n\n", o.split,
                     c.issues, c.skipped);
  out += "| measure | value |\n| --- | ---: |\n";
  out += fmt::format("| top-1 symptom | {} |\n", pct(c.top1, c.issues));
  out += fmt::format("| top-3 symptom | {} |\n", pct(c.top3, c.issues));
  out += fmt::format("| stage | {} |\n", pct(c.stage, c.issues));
  out += fmt::format("| root cause | {} |\n", pct(c.root_cause, c.issues));
  out += fmt::format("| failures answered (not 'none') | {} |\n",
                     pct(c.failures_answered, c.failures));
  out += fmt::format("| non-failures declined ('none') | {} |\n", pct(c.nones_right, c.nones));
  return c;
}

int run_eval(const Tables& t, const EvalOptions& o) {
  std::string table;
  const auto c = evaluate(t, o, &table);
  std::printf("%s", table.c_str());
  const double d = std::max(c.issues, 1);
  int rc = 0;
  auto check = [&](const char* what, int n, double min) {
    if (100.0 * n / d + 1e-9 < min) {
      std::printf("below threshold: %s %.1f%% < %.1f%%\n", what, 100.0 * n / d, min);
      rc = 1;
    }
  };
  check("top-1", c.top1, o.min_top1);
  check("top-3", c.top3, o.min_top3);
  check("stage", c.stage, o.min_stage);
  check("root cause", c.root_cause, o.min_root_cause);
  return rc;
}

}  // namespace fl::triage
