#include "harness/triage/report_json.hpp"

namespace fl::triage {

using ojson = nlohmann::ordered_json;

std::string exit_meaning(int status) {
  switch (status) {
    case 0:
      return "an answer (a weak one says so under confidence)";
    case 1:
      return "no distributed-failure signature found";
    default:
      return "an input error (unreadable, binary, a bad signature file, a refused --write)";
  }
}

namespace {

const char* basis_name(Result::Basis b) {
  switch (b) {
    case Result::Basis::kTables:
      return "tables";
    case Result::Basis::kContext:
      return "context";
    case Result::Basis::kLearned:
      return "learned";
    case Result::Basis::kInferred:
      return "inferred";
  }
  return "tables";
}

ojson faultline_json(const dialect::Produced& p) {
  ojson j = {{"scenarios", p.scenarios}, {"more_scenarios", p.more_scenarios}};
  j["events"] = ojson::array();
  for (const auto& m : p.matches) {
    ojson e = {{"evidence_line", m.line},
               {"logs_signature", m.signature},
               {"symptom_training", m.train},
               {"symptom_serving", m.serve}};
    e["symptom_before_first_step"] = m.before_first.empty() ? ojson() : ojson(m.before_first);
    // No producer: both lines null and `no_producer` says why.
    e["pytorch_line"] = m.no_producer.empty() ? ojson(m.pytorch) : ojson();
    e["faultline_line"] = m.no_producer.empty() ? ojson(m.faultline) : ojson();
    e["no_producer"] = m.no_producer.empty() ? ojson() : ojson(m.no_producer);
    j["events"].push_back(std::move(e));
  }
  return j;
}

ojson candidates_json(const std::vector<Candidate>& cs,
                      const std::map<std::string, std::string>& names, bool symptoms) {
  ojson out = ojson::array();
  for (const auto& c : cs) {
    const auto it = names.find(c.id);
    ojson j = {{"id", c.id}, {"name", it == names.end() ? "" : it->second}, {"score", c.score}};
    j["from"] = c.basis.empty() ? ojson() : ojson(c.basis);
    j["evidence"] = ojson::array();
    for (const auto& e : c.evidence) {
      j["evidence"].push_back({{"line", e.line}, {"signature", e.signature}, {"text", e.text}});
    }
    if (symptoms) j["faultline"] = c.faultline.empty() ? ojson() : faultline_json(c.faultline);
    out.push_back(std::move(j));
  }
  return out;
}

std::string confidence_note(const Result& r) {
  if (r.basis == Result::Basis::kInferred && !r.overruled.empty()) return overruled_note(r);
  switch (r.basis) {
    case Result::Basis::kContext:
      return "no error text matched; the answer rests on context lines only";
    case Result::Basis::kLearned:
      return "no table signature matched; the answer rests on words learned from the corpus's "
             "tune split";
    case Result::Basis::kInferred:
      return "no signature reached an answer; the stage is inferred from stage words, the "
             "candidates are that stage's common symptoms on the corpus's tune split";
    case Result::Basis::kTables:
      break;
  }
  return "";
}

}  // namespace

ojson error_json(const std::string& error, int status) {
  return {{"error", error}, {"exit_status", status}, {"exit_meaning", exit_meaning(status)}};
}

ojson result_json(const Result& r, const Tables& t, const Input& in,
                  const std::string& input_name) {
  ojson j;
  j["input"] = {{"name", input_name},
                {"bytes", in.original_bytes},
                {"bytes_read", in.text.size()},
                {"truncated", r.truncated},
                {"lines", r.lines}};
  if (r.truncated) j["input"]["note"] = "the input was over the size limit; only its tail was read";
  if (r.kind == Result::Kind::kEmpty || r.kind == Result::Kind::kBinary) {
    j.update(error_json(r.why, r.kind == Result::Kind::kBinary ? 2 : 1));
    return j;
  }
  j["read"] = ojson::array();
  for (const auto& e : r.env) {
    j["read"].push_back({{"key", e.key}, {"value", e.value}, {"line", e.line}, {"text", e.text}});
  }
  const bool found = r.kind == Result::Kind::kFound;
  j["answer"] = found ? "found" : "none";
  j["why"] = found ? ojson() : ojson(r.why);
  if (found) {
    j["stage"] = {{"id", r.stage}, {"name", t.taxonomy.stage_name.at(r.stage)}};
    j["confidence"] = r.basis == Result::Basis::kTables ? "strong" : "weak";
    j["basis"] = basis_name(r.basis);
    const std::string note = confidence_note(r);
    j["confidence_note"] = note.empty() ? ojson() : ojson(note);
    j["overruled"] = r.overruled.empty() ? ojson() : ojson(r.overruled);
  } else {
    j["stage"] = ojson();
  }
  // A found answer's five best symptoms (as the text report); below the threshold, three.
  std::vector<Candidate> sym(r.symptoms.begin(),
                             r.symptoms.begin() + std::min<size_t>(r.symptoms.size(), 5));
  if (!found && sym.size() > 3) sym.resize(3);
  j[found ? "symptoms" : "weak_matches"] = candidates_json(sym, t.taxonomy.symptom_name, true);
  if (!found) j["if_failure"] = candidates_json(r.guesses, t.taxonomy.symptom_name, true);
  std::vector<Candidate> rc(r.root_causes.begin(),
                            r.root_causes.begin() + std::min<size_t>(r.root_causes.size(), 3));
  if (found) j["root_causes"] = candidates_json(rc, t.taxonomy.root_cause_name, false);
  j["similar_issues"] = ojson::array();  // stop 53: the nearest labelled tune issues
  for (const auto& n : r.similar) {
    j["similar_issues"].push_back({{"id", n.issue->id},
                                   {"url", n.issue->url},
                                   {"summary", n.issue->summary},
                                   {"similarity", n.similarity},
                                   {"stage", n.issue->stage},
                                   {"symptoms", n.issue->symptoms},
                                   {"root_cause", n.issue->root_cause},
                                   {"shared_words", n.shared}});
  }
  const int status = found ? 0 : 1;
  j["exit_status"] = status;
  j["exit_meaning"] = exit_meaning(status);
  return j;
}

ojson draft_json(const Draft& d) {
  ojson j;
  j["made"] = d.made;
  j["why"] = d.made ? ojson() : ojson(d.why);
  j["base"] = d.base.empty() ? ojson() : ojson(d.base);
  j["symptom"] = d.symptom;
  j["root_cause"] = d.root_cause;
  j["yaml"] = d.made ? ojson(d.yaml) : ojson();
  j["left_out"] = d.dropped;
  ojson cne = ojson::array();
  for (const auto& u : d.unexpressed) cne.push_back({{"kind", u.kind}, {"text", u.text}});
  return {{"draft", j}, {"could_not_express", cne}};
}

}  // namespace fl::triage
