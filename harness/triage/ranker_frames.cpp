#include "harness/triage/ranker_frames.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "harness/triage/triage.hpp"
#include "harness/triage/yaml_file.hpp"

namespace fl::triage {

namespace {

// learn_frames.py's expressions, character for character.
const std::regex& py_frame() {
  static const std::regex r(R"rx(([^"\s]*\.py)", line \d+, in ([A-Za-z_<][\w<>]*))rx");
  return r;
}
const std::regex& source_ref() {
  static const std::regex r(
      R"rx(([\w./\\-]*\.(?:py|cpp|cc|cu|cuh|cxx|hpp|c|h)):\d+(?::(\w+)\])?)rx");
  return r;
}
const std::regex& cxx_frame() {
  static const std::regex r(
      R"rx((?:#\d+ +0x[0-9a-fA-F]+ in |frame #\d+: |raised from )([A-Za-z_~][\w~]*(?:::[A-Za-z_~][\w~]*)*))rx");
  return r;
}
constexpr size_t kLineChars = 2000;  // learn_frames.py LINE_CHARS

const std::set<std::string>& roots() {  // learn_frames.py ROOTS
  static const std::set<std::string> r = {"deepspeed",
                                          "megatron",
                                          "colossalai",
                                          "torch",
                                          "transformers",
                                          "accelerate",
                                          "apex",
                                          "transformer_engine",
                                          "vllm",
                                          "peft",
                                          "trl",
                                          "lightning",
                                          "pytorch_lightning",
                                          "fairscale",
                                          "xformers",
                                          "flash_attn",
                                          "triton",
                                          "nemo",
                                          "horovod",
                                          "bitsandbytes",
                                          "datasets",
                                          "tensorrt_llm",
                                          "mmengine",
                                          "sglang",
                                          "torchtitan",
                                          "fairseq",
                                          "huggingface_hub"};
  return r;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `python3`, `python3.10`: a standard library's folder (learn_frames.py STDLIB).
bool stdlib_dir(const std::string& p) {
  if (p.size() < 7 || p.compare(0, 6, "python") != 0 ||
      !std::isdigit(static_cast<unsigned char>(p[6])))
    return false;
  if (p.size() == 7) return true;
  if (p[7] != '.' || p.size() == 8) return false;
  return std::all_of(p.begin() + 8, p.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// learn_frames.py module_of.
std::string module_of(std::string path) {
  std::replace(path.begin(), path.end(), '\\', '/');
  std::vector<std::string> parts;
  for (size_t i = 0; i <= path.size();) {
    const size_t j = std::min(path.find('/', i), path.size());
    std::string p = path.substr(i, j - i);
    if (!p.empty() && p != "." && p != "..") parts.push_back(std::move(p));
    i = j + 1;
  }
  if (parts.empty()) return "";
  if (!ends_with(parts.back(), ".py")) {
    const size_t dot = parts.back().rfind('.');
    return ascii_lower(dot == std::string::npos ? parts.back() : parts.back().substr(0, dot));
  }
  size_t start = parts.size() - 1;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "site-packages" || parts[i] == "dist-packages" || stdlib_dir(parts[i]))
      start = i + 1;
  }
  if (start == parts.size() - 1) {
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (roots().count(parts[i])) start = i;
  }
  std::vector<std::string> mod;
  for (size_t i = start; i < parts.size(); ++i)
    if (!ends_with(parts[i], ".egg")) mod.push_back(parts[i]);
  mod.back().resize(mod.back().size() - 3);
  if (mod.size() > 1 && mod.back() == "__init__") mod.pop_back();
  return ascii_lower(fmt::format("{}", fmt::join(mod, ".")));
}

// learn_frames.py frame_tokens.
void frame_tokens(const std::string& mod, const std::string& func, std::set<std::string>& out) {
  if (!func.empty()) {
    out.insert(func);
    if (!mod.empty()) out.insert(mod + ":" + func);
  } else if (!mod.empty()) {
    out.insert(mod + ":");
  }
  const size_t a = mod.find('.');
  const size_t b = a == std::string::npos ? a : mod.find('.', a + 1);
  if (b != std::string::npos) out.insert(mod.substr(0, b) + ".*");
  // The words of its names (learn_frames.py PIECE): letters only, 3 or more, split at '.' and '_'.
  const std::string names = mod + "." + func;
  for (size_t i = 0; i <= names.size();) {
    const size_t j = std::min(names.find_first_of("._", i), names.size());
    const bool letters = j - i >= 3 && std::all_of(names.begin() + static_cast<long>(i),
                                                   names.begin() + static_cast<long>(j),
                                                   [](char c) { return c >= 'a' && c <= 'z'; });
    if (letters) out.insert("~" + names.substr(i, j - i));
    i = j + 1;
  }
}

double frames_number(const std::string& file, const YAML::Node& n, const std::string& what) {
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    fail_at(file, n, fmt::format("{}: not a number", what));
  }
  if (!std::isfinite(v) || v < 0)
    fail_at(file, n, fmt::format("{}: must be a finite number >= 0", what));
  return v;
}

std::map<std::string, double> stage_row(const std::string& file, const YAML::Node& n,
                                        const std::string& what, const Taxonomy& t) {
  if (!n.IsMap()) fail_at(file, n, fmt::format("{}: must map stages to counts", what));
  std::map<std::string, double> out;
  for (const auto& kv : n) {
    const auto s = kv.first.as<std::string>();
    if (s.size() != 1 || !std::isdigit(static_cast<unsigned char>(s[0])) ||
        !t.stage_name.count(s[0] - '0') || s[0] == '0')
      fail_at(file, kv.first,
              fmt::format("{}: stage '{}' is not a failure stage of the taxonomy", what, s));
    out[s] = frames_number(file, kv.second, what + ": " + s);
  }
  return out;
}

double frame_log_p(const FrameModel& m, const std::string& stage, const std::string& token,
                   double alpha) {
  double n = 0;
  if (const auto it = m.rows.find(token); it != m.rows.end()) {
    if (const auto c = it->second.find(stage); c != it->second.end()) n = c->second;
  }
  const auto s = m.sums.find(stage);
  const double sum = s == m.sums.end() ? 0 : s->second;
  return std::log((n + alpha) / (sum + alpha * static_cast<double>(m.rows.size())));
}

}  // namespace

void load_frame_model(const std::string& file, const Taxonomy& t, FrameModel& m) {
  if (!std::filesystem::exists(file)) return;
  const YAML::Node doc = load_yaml(file, "ranker file");
  check_keys(file, doc, {"issues", "stages", "frame_stages"}, "file");
  if (doc["issues"]) m.issues = static_cast<int>(frames_number(file, doc["issues"], "issues"));
  if (!doc["stages"]) fail_at(file, doc, "stages: missing (stage -> failures with frames)");
  m.stages = stage_row(file, doc["stages"], "stages", t);
  const YAML::Node rows = doc["frame_stages"];
  if (rows && !rows.IsNull()) {
    if (!rows.IsMap()) fail_at(file, rows, "frame_stages: must map frame tokens to stages");
    for (const auto& kv : rows) {
      const auto token = kv.first.as<std::string>();
      if (token.empty() || token != ascii_lower(token))
        fail_at(file, kv.first, fmt::format("frame_stages: '{}' is not a lower-case token", token));
      auto row = stage_row(file, kv.second, "frame_stages: " + token, t);
      for (const auto& [st, c] : row) m.sums[st] += c;
      m.rows[token] = std::move(row);
    }
  }
  m.loaded = !m.rows.empty();
}

std::vector<std::string> frame_line_tokens(std::string_view raw) {
  const std::string line(raw.substr(0, std::min(raw.size(), kLineChars)));
  std::set<std::string> out;
  using It = std::sregex_iterator;
  for (It it(line.begin(), line.end(), py_frame()), end; it != end; ++it)
    frame_tokens(module_of((*it)[1].str()), ascii_lower((*it)[2].str()), out);
  for (It it(line.begin(), line.end(), source_ref()), end; it != end; ++it)
    frame_tokens(module_of((*it)[1].str()), ascii_lower((*it)[2].matched ? (*it)[2].str() : ""),
                 out);
  for (It it(line.begin(), line.end(), cxx_frame()), end; it != end; ++it) {
    const std::string name = ascii_lower((*it)[1].str());
    const size_t cut = name.rfind("::");
    std::string mod = cut == std::string::npos ? "" : name.substr(0, cut);
    for (size_t i = mod.find("::"); i != std::string::npos; i = mod.find("::", i + 1))
      mod.replace(i, 2, ".");
    frame_tokens(mod, cut == std::string::npos ? name : name.substr(cut + 2), out);
  }
  return {out.begin(), out.end()};
}

std::vector<FrameHit> input_frames(std::string_view text, const FrameModel& m, size_t max_bytes) {
  size_t line = 1, from = 0;
  if (text.size() > max_bytes) {  // the last max_bytes, from a line's start
    const size_t cut = text.find('\n', text.size() - max_bytes);
    from = cut == std::string_view::npos ? text.size() : cut + 1;
    line +=
        static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(from), '\n'));
  }
  std::vector<FrameHit> out;
  std::unordered_set<std::string> seen;
  for (size_t i = from; i < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', i), text.size());
    const std::string_view l = text.substr(i, end - i);
    i = end + 1;
    const std::string_view head = l.substr(0, std::min(l.size(), kLineChars));
    const bool maybe =
        head.find(".py") != std::string_view::npos || head.find('#') != std::string_view::npos ||
        head.find("raised from") != std::string_view::npos ||
        head.find(".c") != std::string_view::npos || head.find(".h") != std::string_view::npos;
    if (!maybe) continue;
    for (auto& tok : frame_line_tokens(l)) {
      if ((m.loaded && !m.rows.count(tok)) || !seen.insert(tok).second) continue;
      out.push_back({std::move(tok), line, std::string(l)});
    }
  }
  return out;
}

std::map<std::string, double> frame_posterior(const FrameModel& m,
                                              const std::vector<FrameHit>& hits, double alpha,
                                              bool k_prior) {
  std::map<std::string, double> out;
  double n = 0;
  for (const auto& [st, c] : m.stages) n += c;
  const bool any = std::any_of(hits.begin(), hits.end(),
                               [&](const FrameHit& h) { return m.rows.count(h.token) > 0; });
  if (!m.loaded || n <= 0 || !any) return out;
  double best = -1e300;
  for (const auto& [st, c] : m.stages) {
    // frames_prior: the stages' shares of failures with frames; else a flat prior (the ranker's
    // stage_prior_weight leans to the larger stages already).
    double s =
        k_prior ? std::log((c + alpha) / (n + alpha * static_cast<double>(m.stages.size()))) : 0.0;
    for (const auto& h : hits)
      if (m.rows.count(h.token)) s += frame_log_p(m, st, h.token, alpha);
    out[st] = s;
    best = std::max(best, s);
  }
  double z = 0;
  for (auto& [st, s] : out) z += (s = std::exp(s - best));
  for (auto& [st, s] : out) s /= z;
  return out;
}

std::vector<const FrameHit*> carrying_frames(const FrameModel& m, const std::string& stage,
                                             const std::vector<FrameHit>& hits, double alpha,
                                             size_t n) {
  double all = 0;
  for (const auto& [st, s] : m.sums) all += s;
  const double vocab = static_cast<double>(m.rows.size());
  std::vector<std::pair<double, const FrameHit*>> lift;
  for (const auto& h : hits) {
    const auto it = m.rows.find(h.token);
    if (it == m.rows.end() || !it->second.count(stage)) continue;
    double in_all = 0;
    for (const auto& [st, c] : it->second) in_all += c;
    const double l =
        frame_log_p(m, stage, h.token, alpha) - std::log((in_all + alpha) / (all + alpha * vocab));
    if (l > 0) lift.emplace_back(l, &h);
  }
  std::stable_sort(lift.begin(), lift.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const FrameHit*> out;
  for (size_t i = 0; i < lift.size() && i < n; ++i) out.push_back(lift[i].second);
  return out;
}

std::map<std::string, double> read_frames(std::string_view text, const Ranker& k,
                                          std::vector<FrameHit>& hits) {
  if (k.frames_stage_weight <= 0 || !k.frames.loaded) return {};
  hits = input_frames(text, k.frames, static_cast<size_t>(std::max(k.frames_max_bytes, 0)));
  return frame_posterior(k.frames, hits, k.frames_alpha, k.frames_prior);
}

std::vector<EvidenceLine> frame_evidence(const std::vector<FrameHit>& hits, const Ranker& k,
                                         int stage) {
  std::map<size_t, std::pair<std::string, std::vector<std::string>>> by_line;
  if (hits.empty() || stage <= 0) return {};
  for (const FrameHit* h :
       carrying_frames(k.frames, std::to_string(stage), hits, k.frames_alpha, 3)) {
    auto& [text, ts] = by_line[h->line];
    text = h->text;
    ts.push_back(h->token);
  }
  std::vector<EvidenceLine> out;
  for (const auto& [line, tt] : by_line) {
    out.push_back(
        {line, tt.first,
         fmt::format("traceback frame{} '{}' (stage {} of tune failures with frames)",
                     tt.second.size() > 1 ? "s" : "", fmt::join(tt.second, "', '"), stage)});
  }
  return out;
}

}  // namespace fl::triage
