// `reference:` — where a scenario comes from. Either it cites one public thread whose cause and
// fix are the ones the scenario builds (`issue:` or `pr:`, with an optional `url:` that must link
// that thread), or it says plainly that it stands for a mechanism (`kind: stands-for` with
// `mechanism:`) and cites nothing: a thread whose cause or fix differs is not a citation.
// The taxonomy ids (symptom, root_cause, fix_pattern) are checked in scenario.cpp.
#include <regex>

#include <fmt/format.h>

#include "harness/scenario/loader.hpp"

namespace fl::harness::loader {

namespace {

const char* const kStandsForKeys = "kind, mechanism, symptom, root_cause, fix_pattern";

std::string str(const YAML::Node& ref, const char* key) {
  return ref && ref[key] ? ref[key].as<std::string>() : "";
}

// OWNER/NAME#NUMBER as GitHub spells a thread; the URL of that thread when it is one.
void check_thread(const std::string& file, const YAML::Node& raw, const char* key,
                  const std::string& cite, const std::string& url) {
  static const std::regex thread_re(R"(([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9._-]+)#([0-9]+))");
  std::smatch m;
  if (!std::regex_match(cite, m, thread_re)) {
    fail_at(file, raw[key], std::string("reference.") + key,
            fmt::format("'{}' is not OWNER/NAME#NUMBER (allowed: e.g. {})", cite,
                        std::string(key) == "pr" ? "NVIDIA/Megatron-LM#5331"
                                                 : "deepspeedai/DeepSpeed#2223"));
  }
  if (url.empty()) return;
  const std::string want = fmt::format("https://github.com/{}/{}/{}/{}", m[1].str(), m[2].str(),
                                       std::string(key) == "pr" ? "pull" : "issues", m[3].str());
  if (url != want) {
    fail_at(file, raw["url"], "reference.url",
            fmt::format("'{}' does not link {} {} (allowed: {})", url,
                        std::string(key) == "pr" ? "pull request" : "issue", cite, want));
  }
}

}  // namespace

void parse_reference(const std::string& file, const YAML::Node& doc, const YAML::Node& r,
                     Scenario& s) {
  const YAML::Node ref = r["reference"];
  const YAML::Node raw = doc["reference"] ? doc["reference"] : YAML::Node();
  s.ref.issue = str(ref, "issue");
  s.ref.pr = str(ref, "pr");
  s.ref.url = str(ref, "url");
  s.ref.mechanism = str(ref, "mechanism");
  s.ref.symptom = str(ref, "symptom");
  s.ref.root_cause = str(ref, "root_cause");
  s.ref.fix_pattern = str(ref, "fix_pattern");
  s.ref.kind = str(ref, "kind");
  if (s.ref.kind.empty() && !s.ref.pr.empty()) s.ref.kind = "pr";
  if (s.ref.kind.empty() && !s.ref.issue.empty()) s.ref.kind = "issue";
  ErrorCollector::check([&] {
    if (s.ref.kind == "stands-for") {
      // A mechanism cites no thread: any of them here would read as a reproduction of it.
      for (const char* key : {"issue", "pr", "url"}) {
        if (!str(ref, key).empty()) {
          fail_at(file, raw[key], std::string("reference.") + key,
                  fmt::format("a stands-for reference cites no thread (allowed with kind "
                              "stands-for: {})",
                              kStandsForKeys));
        }
      }
      if (s.ref.mechanism.empty()) {
        fail_at(file, raw["kind"], "reference.mechanism",
                "required with kind stands-for (allowed: a sentence naming the mechanism the "
                "scenario builds)");
      }
      return;
    }
    if (!s.ref.mechanism.empty()) {
      fail_at(file, raw["mechanism"], "reference.mechanism",
              "only a stands-for reference names a mechanism (allowed: kind: stands-for with "
              "it, or a cited issue or pr without it)");
    }
    if (!s.ref.issue.empty() && !s.ref.pr.empty()) {
      fail_at(file, raw["pr"], "reference.pr",
              "a reference cites one thread (allowed: issue or pr, not both)");
    }
    if (s.ref.kind == "issue" || s.ref.kind == "pr") {
      const char* key = s.ref.kind == "pr" ? "pr" : "issue";
      const std::string cite = s.ref.kind == "pr" ? s.ref.pr : s.ref.issue;
      if (cite.empty()) {
        fail_at(file, raw["kind"], std::string("reference.") + key,
                fmt::format("required with kind {} (allowed: OWNER/NAME#NUMBER)", s.ref.kind));
      }
      check_thread(file, raw, key, cite, s.ref.url);
    } else if (!s.ref.url.empty()) {
      fail_at(file, raw["url"], "reference.url",
              "a link needs the thread it links (allowed: with reference.issue or reference.pr)");
    }
  });
}

}  // namespace fl::harness::loader
