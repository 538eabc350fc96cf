#include "harness/triage/context_rows.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "harness/triage/yaml_file.hpp"

namespace fl::triage {

std::vector<std::string> read_context_for(const std::string& file, const YAML::Node& item) {
  const YAML::Node n = item["context_for"];
  if (!n) return {};
  if (!n.IsSequence() || n.size() == 0)
    fail_at(file, n, "context_for: must list the ids of one or more error rows");
  std::vector<std::string> out;
  for (const auto& id : n) {
    if (!id.IsScalar()) fail_at(file, id, "context_for: each entry must be a signature id");
    out.push_back(id.as<std::string>());
  }
  return out;
}

void check_context_rows(const Tables& t) {
  std::map<std::string, const Signature*> by_id;
  for (const auto& s : t.signatures) by_id[s.id] = &s;
  for (const auto& s : t.signatures) {
    if (s.context_for.empty()) continue;
    const auto where = fmt::format("{}: signature '{}': context_for", s.file, s.id);
    if (s.fallback) throw SignatureError(where + ": a learned fallback cannot be a context row");
    for (const auto& id : s.context_for) {
      const auto it = by_id.find(id);
      if (it == by_id.end())
        throw SignatureError(fmt::format("{}: '{}' is not a signature id", where, id));
      if (!it->second->context_for.empty())
        throw SignatureError(fmt::format("{}: '{}' is itself a context row", where, id));
    }
  }
}

namespace {

// A listed error row's line and a context line (`own`: the context row's lines) that is another
// line; none when the two only meet on one line (the rows that read one line judge that line).
bool pair_lines(const std::vector<Hit>& hits, const std::vector<size_t>& errors,
                const std::vector<EvidenceLine>& own, EvidenceLine& context, EvidenceLine& error) {
  for (const size_t e : errors) {
    for (const auto& line : hits[e].lines) {
      const auto other = std::find_if(own.begin(), own.end(),
                                      [&](const EvidenceLine& c) { return c.line != line.line; });
      if (other == own.end()) continue;
      error = line;
      context = *other;
      return true;
    }
  }
  return false;
}

}  // namespace

void apply_context_rows(std::vector<Hit>& hits, const Tables& t) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < t.signatures.size(); ++i) index[t.signatures[i].id] = i;
  for (size_t i = 0; i < t.signatures.size(); ++i) {
    const auto& s = t.signatures[i];
    if (s.context_for.empty() || hits[i].lines.empty()) continue;
    std::vector<size_t> errors;
    for (const auto& id : s.context_for) {
      if (const auto it = index.find(id); it != index.end()) errors.push_back(it->second);
    }
    EvidenceLine context, error;
    if (!pair_lines(hits, errors, hits[i].lines, context, error)) {
      hits[i].lines.clear();  // context alone, or only on the error's own line: not this row's
      continue;
    }
    hits[i].lines = {context, error};
    std::sort(hits[i].lines.begin(), hits[i].lines.end(),
              [](const EvidenceLine& a, const EvidenceLine& b) { return a.line < b.line; });
  }
}

}  // namespace fl::triage
