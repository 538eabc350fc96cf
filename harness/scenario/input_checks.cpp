// Checks of scenario input that the schema walk alone does not make: the file's size and its
// single YAML document, keys given twice (yaml-cpp keeps the last one silently), plugin names,
// regexes and tc rates. Each is linear in the input and reports file:line:col.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "base/settings.hpp"
#include "base/utf8.hpp"
#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kScenarioMaxBytes, int64_t, "FAULTLINE_SCENARIO_MAX_BYTES", 4 << 20,
                  "Largest scenario file `faultline` loads, in bytes (a larger one is an error)");

namespace {

// 1-based line and column of byte `pos` of `text`.
std::pair<size_t, size_t> line_col(std::string_view text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// Where the second document starts: the second "---" line, or the first one after content.
size_t second_document(std::string_view text) {
  bool content = false;
  for (size_t i = 0; i < text.size();) {
    size_t end = text.find('\n', i);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(i, end - i);
    const bool marker = line.rfind("---", 0) == 0 &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    if (marker && content) return i;
    if (line.rfind("...", 0) == 0 && content) return i;
    const size_t first = line.find_first_not_of(" \t\r");
    if (marker) {
      content = content || line.find_first_not_of(" \t\r", 3) != std::string_view::npos;
    } else if (first != std::string_view::npos && line[first] != '#' && line[0] != '%') {
      content = true;
    }
    i = end + 1;
  }
  return std::string_view::npos;
}

}  // namespace

int64_t scenario_max_bytes() {
  return kScenarioMaxBytes.get();
}

YAML::Node parse_scenario_text(const std::string& file, const std::string& text) {
  if (!is_valid_utf8(text)) {
    size_t pos = 0;
    for (; pos < text.size(); pos += utf8_sequence_length(text, pos)) {
      if (utf8_sequence_length(text, pos) == 0) break;
    }
    const auto [l, c] = line_col(text, pos);
    raise<ScenarioError>("{}:{}:{}: the file is not UTF-8 text (byte 0x{:02x})", file, l, c,
                         static_cast<unsigned char>(text[pos]));
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    raise<ScenarioError>("{}:{}:{}: YAML syntax: {}", file, e.mark.line + 1, e.mark.column + 1,
                         e.msg);
  }
  if (docs.size() > 1) {
    const auto m = docs[1].Mark();
    size_t l = static_cast<size_t>(m.line + 1), c = static_cast<size_t>(m.column + 1);
    if (m.line < 0 || docs[1].IsNull()) {
      const size_t at = second_document(text);
      std::tie(l, c) =
          at == std::string::npos ? std::pair<size_t, size_t>{1, 1} : line_col(text, at);
    }
    raise<ScenarioError>(
        "{}:{}:{}: a second YAML document (a scenario file holds one; split it into files)", file,
        l, c);
  }
  return docs.empty() ? YAML::Node() : docs[0];
}

YAML::Node read_scenario_file(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) raise<ScenarioError>("{}: cannot read the scenario file: {}", path, ec.message());
  const int64_t max = kScenarioMaxBytes.get();
  if (static_cast<int64_t>(size) > max) {
    raise<ScenarioError>(
        "{}: the file is {} bytes (allowed: up to {}; FAULTLINE_SCENARIO_MAX_BYTES sets the limit)",
        path, size, max);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<ScenarioError>("{}: cannot read the scenario file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_scenario_text(path, ss.str());
}

namespace {

// Aliases let a small file name a huge tree (each level repeating the one before: a billion
// nodes from ten lines), so the walk has a budget of nodes, as many as the file may have bytes.
void check_duplicates(const std::string& file, const YAML::Node& node, const std::string& path,
                      int64_t& budget) {
  if (--budget < 0) {
    raise<ScenarioError>(
        "{}: the document expands to more than {} nodes (aliases repeating "
        "nodes; allowed: as many as FAULTLINE_SCENARIO_MAX_BYTES)",
        file, kScenarioMaxBytes.get());
  }
  if (node.IsMap()) {
    std::unordered_map<std::string, YAML::Mark> seen;
    seen.reserve(node.size());
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const std::string child = path.empty() ? key : path + "." + key;
      if (!it->first.IsScalar()) {
        ErrorCollector::check([&] {
          fail_at(file, it->first, path.empty() ? "(document)" : path,
                  "a key must be a plain word, not a list or a map");
        });
        continue;
      }
      auto [first, fresh] = seen.emplace(key, it->first.Mark());
      if (!fresh) {
        auto at = first;  // a lambda cannot name a structured binding before clang 16
        ErrorCollector::check([&] {
          fail_at(file, it->first, child,
                  at->second.line >= 0 ? fmt::format("duplicate key (first at line {}, column {})",
                                                     at->second.line + 1, at->second.column + 1)
                                       : std::string("duplicate key"));
        });
      }
      check_duplicates(file, it->second, child, budget);
    }
  } else if (node.IsSequence()) {
    size_t i = 0;
    for (auto it = node.begin(); it != node.end(); ++it, ++i) {
      check_duplicates(file, *it, fmt::format("{}[{}]", path, i), budget);
    }
  }
}

}  // namespace

void check_duplicate_keys(const std::string& file, const YAML::Node& node,
                          const std::string& path) {
  int64_t budget = kScenarioMaxBytes.get();
  check_duplicates(file, node, path, budget);
}

void check_identifier(const std::string& file, const YAML::Node& n, const std::string& key) {
  const std::string& v = n.Scalar();
  bool ok = !v.empty() && v.size() <= 64 && !std::isdigit(static_cast<unsigned char>(v[0]));
  for (char c : v) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) {
    fail_at(file, n, key,
            fmt::format("'{}' is not a plugin name (allowed: a letter or '_', then letters, "
                        "digits or '_', up to 64; the library is libfl_NAME.so)",
                        valid_utf8(v)));
  }
}

void check_needed_key(const std::string& file, const YAML::Node& n, const std::string& key) {
  const std::string& v = n.Scalar();
  const auto& schema = scenario_schema();
  const bool ok = v.rfind("reference.", 0) != 0 &&
                  std::any_of(schema.begin(), schema.end(), [&](const KeySpec& k) {
                    return k.path == v && k.type != KeyType::kSection;
                  });
  if (!ok) {
    fail_at(file, n, key,
            fmt::format("'{}' is not a key the mechanism can need (allowed: a key of the schema "
                        "with a value, outside reference, e.g. topology.ranks)",
                        valid_utf8(v)));
  }
}

int64_t model_context(const std::string& model, int64_t seq_len_override) {
  if (seq_len_override > 0) return seq_len_override;
  return model == "small" ? 64 : 16;  // GptConfig::small() and tiny()
}

void check_infer_context(const std::string& file, const YAML::Node& doc, const Scenario& s) {
  // The infer worker declares --seed as workload.infer.seed, but the harness passes every
  // inference rank the scenario's `seed` as --seed (0, the default, means that seed), so another
  // value would be silently overridden (tp-ranks-sample-apart set 3 and ran under 7): refuse it.
  const YAML::Node w = doc["workload"];
  if (w && w.IsMap() && w["infer"] && w["infer"].IsMap() && w["infer"]["seed"] &&
      w["infer"]["seed"].IsScalar() && w["infer"]["seed"].Scalar() != "0" &&
      w["infer"]["seed"].Scalar() != std::to_string(s.seed)) {
    fail_at(file, w["infer"]["seed"], "workload.infer.seed",
            fmt::format("{} is not the scenario's seed {}: the harness passes `seed` to every rank "
                        "as --seed, so this value would be overridden (allowed: 0 or {}; set the "
                        "top-level `seed` instead; workload.infer.seed_offset varies it per rank)",
                        valid_utf8(w["infer"]["seed"].Scalar()), s.seed, s.seed));
  }
  if (s.workload.kind != "infer") return;
  const int64_t context = model_context(s.workload.model, s.workload.seq_len);
  const std::string where = s.workload.seq_len > 0
                                ? fmt::format("workload.shape.seq_len {}", context)
                                : fmt::format("model {}", s.workload.model);
  // The document's own node (its marks give the line and column), else the workload map.
  auto node = [&](const char* key) {
    const YAML::Node w = doc["workload"];
    if (w && w.IsMap() && w["infer"] && w["infer"].IsMap() && w["infer"][key]) {
      return w["infer"][key];
    }
    return w && w.IsMap() ? w : doc;
  };
  if (s.workload.prompt_len > context) {
    fail_at(file, node("prompt_len"), "workload.infer.prompt_len",
            fmt::format("a prompt of {} tokens is longer than the context of {} tokens ({}) "
                        "(allowed: 1-{})",
                        s.workload.prompt_len, context, where, context));
  }
  // context_limit clamp or none lets a request ask for more than the context: the engine clamps
  // it, or (the flaw a scenario reproduces) fails at the context's end.
  const YAML::Node limit = node("context_limit");
  const bool refused = !limit || !limit.IsScalar() || limit.Scalar() == "refuse";
  if (refused && s.workload.prompt_len + s.workload.new_tokens > context) {
    fail_at(file, node("new_tokens"), "workload.infer.new_tokens",
            fmt::format("{} new tokens after a prompt of {} do not fit in the context of {} "
                        "tokens ({}) (allowed: 1-{})",
                        s.workload.new_tokens, s.workload.prompt_len, context, where,
                        context - s.workload.prompt_len));
  }
}

}  // namespace fl::harness::loader
